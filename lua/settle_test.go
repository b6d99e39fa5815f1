package lua_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// TestSettleMatchesMirror is the differential test of the settle script and
// internal/algo's Settle and Overdraw: from states that random decisions
// left (or none), thousands of settlements to final costs from 0 to far
// past the capacity, with and without a record of an earlier settlement,
// and overdraws, on limits of every size, run through the script on a real
// Redis (the clock passed as arguments) and through the mirror. Every
// reply, stored state and TTL must be identical.
func TestSettleMatchesMirror(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	script := redis.NewScript(lua.SettleSourceAt())
	if err := script.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+7, 2026))
			key := fmt.Sprintf("%s{settle-%s}:s", prefix, alg)
			record := key + ":s:r"
			pool := diffLimits(rng, alg)
			var kinds [3]int
			for step := range 3000 {
				limit := pool[rng.IntN(len(pool))]
				now := diffStart + rng.Int64N(diffEnd-diffStart)
				// A state some decisions left, or none.
				var s algo.State
				for range rng.IntN(4) {
					q := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: diffCost(rng, limit)})
					s, _ = algo.For(alg)(s, now, q)
					now = diffAdvance(rng, limit, now)
				}
				if now >= diffEnd {
					continue // past the century the scripts are exact in
				}
				reserved := max(diffCost(rng, limit), 1)
				p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: reserved})
				adm := algo.Admission{Reserved: reserved, At: now - rng.Int64N(2*max(p.Period, 1)+1), Reset: rng.Int64N(2*max(p.Period, 1) + 1)}
				switch rng.IntN(8) {
				case 0:
					adm.At = 0 // unknown: a refund of hits
				case 1:
					adm.At = now // settled at once
				case 2:
					adm.Reset = algo.MaxDebtTime // admitted in debt
				}
				final := settleCost(rng, reserved)
				mode := rng.IntN(3) // 0 settle, 1 with a record, 2 overdraw
				var prev int64 = -1
				if mode == 1 && rng.IntN(2) == 0 {
					prev = settleCost(rng, reserved)
				}
				kinds[mode]++

				var st algo.State
				var w algo.Write
				var want algo.Result
				switch mode {
				case 2:
					q := p
					q.Cost = final
					if final == 0 {
						q.Cost = 1
					}
					st, w, want = algo.Overdraw(alg, s, now, q)
					final = q.Cost
				default:
					a := adm
					a.Settled = prev
					st, w, want = algo.Settle(alg, s, now, p, a, final)
				}

				pipe := c.TxPipeline()
				pipe.Del(ctx, key, record)
				if s.Present {
					pipe.Set(ctx, key, algo.Format(alg, s), 0)
				}
				if prev >= 0 {
					pipe.Set(ctx, record, prev, 0)
				}
				keys := []string{key}
				if mode == 1 {
					keys = append(keys, record)
				}
				keys = withLineage(keys...)
				argv := []any{"", mode, 120000, int(alg), p.Rate, p.Period, p.Capacity, p.Cost, final, adm.At, adm.Reset, now / 1e6, now % 1e6}
				if mode == 2 {
					argv[7] = final
				}
				eval := script.EvalSha(ctx, pipe, keys, argv...)
				get := pipe.Get(ctx, key)
				pttl := pipe.PTTL(ctx, key)
				rec := pipe.Get(ctx, record)
				_, err := pipe.Exec(ctx)
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatalf("step %d: %v", step, err)
				}
				reply, err := eval.Int64Slice()
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				where := fmt.Sprintf("step %d mode %d at %s, %s, reserved %d final %d prev %d adm %+v, state before %q",
					step, mode, time.UnixMicro(now).UTC().Format(time.RFC3339Nano), limit, reserved, final, prev, adm, stateString(alg, s))
				got := algo.Result{Allowed: reply[0] == 1, Remaining: reply[1], RetryAfter: reply[2], ResetAfter: reply[3], Debt: reply[4]}
				wantReply := want
				wantReply.TTL = 0
				if len(reply) != 8 || got != wantReply || reply[5] != 0 || reply[7] != now {
					t.Fatalf("%s:\nscript reply %v\nmirror       %+v", where, reply, want)
				}
				stored, err := get.Result()
				if errors.Is(err, redis.Nil) {
					stored = ""
				}
				wantStored := stateString(alg, s)
				switch w {
				case algo.Put:
					wantStored = stateString(alg, st)
				case algo.Delete:
					wantStored = ""
				}
				if stored != wantStored {
					t.Fatalf("%s:\nscript stored %q, mirror %q (%v)", where, stored, wantStored, w)
				}
				if w == algo.Put {
					if ttl := pttl.Val(); ttl > time.Duration(want.TTL)*time.Millisecond || ttl < time.Duration(want.TTL-50)*time.Millisecond {
						t.Fatalf("%s: the script set a TTL of %s, the mirror %dms", where, ttl, want.TTL)
					}
				}
				if mode == 1 {
					if r, _ := rec.Int64(); r != final {
						t.Fatalf("%s: record %d, want %d", where, r, final)
					}
				}
			}
			t.Logf("settled %d, with records %d, overdrawn %d", kinds[0], kinds[1], kinds[2])
		})
	}
}

// settleCost draws a final cost: 0, the reservation, a little off it, or
// far past it.
func settleCost(rng *rand.Rand, reserved int64) int64 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return reserved
	case 2:
		return max(reserved-1-rng.Int64N(reserved), 0)
	case 3:
		return reserved + 1 + rng.Int64N(reserved+1)
	}
	return logUniform(rng, 0, tollgate.MaxRate)
}
