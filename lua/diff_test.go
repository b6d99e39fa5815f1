package lua_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// diffSteps is how many random decisions TestScriptsMatchMirror makes per
// algorithm.
const diffSteps = 4000

// TestScriptsMatchMirror is the differential test of the scripts and their
// Go mirror: for each algorithm, thousands of random decisions (limits of
// every size up to the maxima, limit changes on one identity, costs from 0
// to the capacity, waits from nothing to a full refill, the clock stepping
// back, calendar windows across month and year ends) run on a real Redis,
// through the script with the clock passed as arguments (lua.SourceAt), and
// on internal/algo side by side. Every reply (and the time it reports),
// every stored state string and every TTL must be identical. Expiry follows
// the test's clock: the test removes a key's own TTL after checking it and
// deletes the key when the test's clock passes it, as the Memory store does.
func TestScriptsMatchMirror(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			script := redis.NewScript(lua.SourceAt())
			if err := script.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(alg)+1, 2026))
			key := fmt.Sprintf("%s{diff-%s}:s", prefix, alg)
			pool := diffLimits(rng, alg)
			limit := pool[0]
			// From 2000 to 2100, in whole microseconds.
			now := diffStart + rng.Int64N(diffEnd-diffStart)
			var mirror algo.State
			var expires int64 // µs, on the test's clock, when mirror is present
			var admitted, denied, big int
			for step := range diffSteps {
				if rng.IntN(10) == 0 {
					limit = pool[rng.IntN(len(pool))]
				}
				now = diffAdvance(rng, limit, now)
				if now >= diffEnd {
					// Back to the start of the century, as a new identity:
					// a state 100 years ahead would deny all along.
					now = diffStart + rng.Int64N(365*dayUs)
					expires = now
				}
				if mirror.Present && now >= expires {
					mirror = algo.State{}
					if err := c.Del(ctx, key).Err(); err != nil {
						t.Fatal(err)
					}
				}
				p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: diffCost(rng, limit)})
				if hi, lo := bits.Mul64(uint64(p.Capacity), uint64(max(p.Period, 1))); hi > 0 || lo >= 1<<53 {
					big++
				}
				before := mirror
				st, want := algo.For(alg)(mirror, now, p)

				// One transaction: the TTL cannot run out in real time
				// between the write and its PERSIST.
				pipe := c.TxPipeline()
				eval := script.EvalSha(ctx, pipe, withLineage(key), "", 0, int(alg), p.Rate, p.Period, p.Capacity, p.Cost, now/1e6, now%1e6)
				get := pipe.Get(ctx, key)
				pttl := pipe.PTTL(ctx, key)
				pipe.Persist(ctx, key)
				sent := time.Now()
				_, err := pipe.Exec(ctx)
				took := time.Since(sent)
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatalf("step %d: %v", step, err)
				}
				reply, err := eval.Int64Slice()
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				got := algo.Result{Allowed: reply[0] == 1, Remaining: reply[1], RetryAfter: reply[2], ResetAfter: reply[3]}
				wantReply := want
				wantReply.TTL = 0
				where := fmt.Sprintf("step %d at %s, %s cost %d (params %+v), state before %q", step,
					time.UnixMicro(now).UTC().Format(time.RFC3339Nano), limit, p.Cost, p, stateString(alg, before))
				if len(reply) != 7 || got != wantReply || reply[4] != 0 || reply[5] != 0 || reply[6] != now {
					t.Fatalf("%s:\nscript reply %v\nmirror       %+v", where, reply, want)
				}
				stored, err := get.Result()
				if errors.Is(err, redis.Nil) {
					stored = ""
				}
				if stored != stateString(alg, st) {
					t.Fatalf("%s:\nscript stored %q, mirror %q", where, stored, stateString(alg, st))
				}
				ttl := pttl.Val()
				switch {
				case want.TTL > 0 && (ttl > time.Duration(want.TTL)*time.Millisecond || ttl < time.Duration(want.TTL-1)*time.Millisecond-took):
					// PTTL counts down in real time, which ran for took.
					t.Fatalf("%s: the script set a TTL of %s (read within %s), the mirror %dms", where, ttl, took, want.TTL)
				case want.TTL == 0 && ttl >= 0:
					t.Fatalf("%s: the script set a TTL of %s, the mirror none", where, ttl)
				}
				if want.TTL > 0 {
					expires = now + want.TTL*1000
				}
				mirror = st
				if want.Allowed {
					admitted++
				} else {
					denied++
				}
			}
			t.Logf("%d steps: %d admitted, %d denied, %d with capacity × period of 2^53 or more", diffSteps, admitted, denied, big)
			if admitted < diffSteps/10 || denied < diffSteps/10 || big < diffSteps/10 {
				t.Fatalf("%d admitted, %d denied, %d large: the steps prove too little", admitted, denied, big)
			}
		})
	}
}

const dayUs = int64(24 * time.Hour / time.Microsecond)

// The differential test's clock stays in this century.
var (
	diffStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	diffEnd   = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
)

func stateString(alg tollgate.Algorithm, s algo.State) string {
	if !s.Present {
		return ""
	}
	return algo.Format(alg, s)
}

// logUniform returns an integer in [lo, hi] whose logarithm is uniform, so
// that every magnitude is drawn as often.
func logUniform(rng *rand.Rand, lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	bitsHi := 64 - bits.LeadingZeros64(uint64(hi))
	for {
		n := rng.Int64N(1 << rng.IntN(bitsHi+1))
		if n >= lo && n <= hi {
			return n
		}
	}
}

// diffLimits returns the limits one identity switches between: the sizes
// the documentation promises, and random valid ones up to the maxima.
func diffLimits(rng *rand.Rand, alg tollgate.Algorithm) []tollgate.Limit {
	day := 24 * time.Hour
	pool := []tollgate.Limit{
		{Algorithm: alg, Rate: 100, Period: time.Second, Burst: 200},
		{Algorithm: alg, Rate: 100_000, Period: day},
		{Algorithm: alg, Rate: 1_000_000_000, Period: 30 * day},
		{Algorithm: alg, Rate: 5, Period: 365 * day},
		{Algorithm: alg, Rate: tollgate.MaxRate, Period: day},
		{Algorithm: alg, Rate: tollgate.MaxRate, Period: tollgate.MaxPeriod, Burst: tollgate.MaxRate},
		{Algorithm: alg, Rate: 3, Period: 7 * time.Millisecond},
		{Algorithm: alg, Rate: 1, Period: tollgate.MaxRefill / 100, Burst: 100},                          // a refill of exactly MaxRefill
		{Algorithm: alg, Rate: 999_999_999_989, Period: tollgate.MaxPeriod - time.Microsecond, Burst: 7}, // a prime rate, an odd period
	}
	if alg == tollgate.FixedWindow {
		pool = append(pool, tollgate.Daily(1000), tollgate.Weekly(7), tollgate.Monthly(tollgate.MaxRate), tollgate.Yearly(5))
	}
	for len(pool) < 14 {
		l := tollgate.Limit{
			Algorithm: alg,
			Rate:      logUniform(rng, 1, tollgate.MaxRate),
			Period:    time.Duration(logUniform(rng, 1000, tollgate.MaxPeriod.Microseconds())) * time.Microsecond,
		}
		if rng.IntN(2) == 0 {
			l.Burst = logUniform(rng, 1, tollgate.MaxRate)
		}
		if l.Validate() == nil {
			pool = append(pool, l)
		}
	}
	for _, l := range pool {
		if err := l.Validate(); err != nil {
			panic(err)
		}
	}
	return pool
}

// diffCost draws a cost: mostly small, sometimes the whole capacity,
// sometimes 0 (a read, as a replay makes).
func diffCost(rng *rand.Rand, l tollgate.Limit) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return l.Capacity()
	case 2, 3, 4:
		return 1
	}
	return logUniform(rng, 1, l.Capacity())
}

// diffAdvance moves the clock on the scale of l: an emission interval, a
// period, a refill or a calendar boundary, sometimes not at all, sometimes
// backwards.
func diffAdvance(rng *rand.Rand, l tollgate.Limit, now int64) int64 {
	p := algo.ParamsOf(tollgate.Request{Limit: l})
	period := p.Period
	if l.Calendar != tollgate.NoCalendar {
		_, next := algo.CalendarWindow(l.Calendar, now)
		period = next - now
		if rng.IntN(3) == 0 {
			// Just before or after the boundary.
			return next + rng.Int64N(2001) - 1000
		}
	}
	interval := max(period/p.Rate, 1)
	refill, _ := algo.MulDiv(p.Capacity, period, p.Rate)
	scales := []int64{interval, interval * 4, period, refill}
	s := max(scales[rng.IntN(len(scales))], 1)
	switch rng.IntN(20) {
	case 0, 1, 2, 3, 4, 5:
		return now
	case 6:
		return max(now-rng.Int64N(s+1), 0) // the clock stepped back
	case 7:
		return now + rng.Int64N(1000)
	}
	return now + rng.Int64N(2*s+1)
}
