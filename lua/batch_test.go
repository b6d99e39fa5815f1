package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// batchDecision is one decision of a batch script call: its decide call's
// KEYS and ARGV, on a key name without its side's prefix.
type batchDecision struct {
	keys []string // state, then marker when mode > 0, without prefix
	argv []int64  // mode, replay TTL (mode > 0), algorithm, rate, period, capacity, cost
	bad  bool     // out of range: the batch answers -1 and no decide call is made
}

func (d batchDecision) prefixed(prefix string) []string {
	out := make([]string, len(d.keys))
	for i, k := range d.keys {
		out[i] = prefix + k
	}
	return out
}

// randomBatchDecision draws a decision on one of a few identities, so that
// a batch often holds several decisions on one key, with or without one of
// a few request ids, sometimes a peek, rarely out of range.
func randomBatchDecision(rng *rand.Rand) batchDecision {
	alg := algorithms[rng.IntN(len(algorithms))]
	limits := []tollgate.Limit{
		{Algorithm: alg, Rate: 5, Period: time.Hour},
		{Algorithm: alg, Rate: 20, Period: 10 * time.Minute, Burst: 8},
	}
	if alg == tollgate.FixedWindow {
		limits = append(limits, tollgate.Daily(7))
	}
	limit := limits[rng.IntN(len(limits))]
	cost := int64(1 + rng.IntN(3))
	p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: min(cost, limit.Capacity())})
	d := batchDecision{keys: []string{fmt.Sprintf("id%d:%s", rng.IntN(3), alg)}}
	switch m := rng.IntN(10); {
	case m < 4:
		d.argv = []int64{0}
	case m < 5:
		d.argv = []int64{-1}
	default:
		d.argv = []int64{2, 600_000}
		d.keys = append(d.keys, fmt.Sprintf("%s:r:req%d", d.keys[0], rng.IntN(4)))
	}
	d.argv = append(d.argv, int64(alg), p.Rate, p.Period, p.Capacity, p.Cost)
	if rng.IntN(25) == 0 {
		d.argv[len(d.argv)-1] = p.Capacity + 1 // cost above capacity
		d.bad = true
	}
	return d
}

// TestBatchMatchesSequentialCalls is the batch script's differential test:
// random batches of decisions (several on one key, repeated request ids,
// peeks, an out-of-range decision now and then) run as one batch script
// call on one side and as one decide call each, in the same order, at the
// same pinned instant, on the other. Every decision's reply, every stored
// state and marker must be identical, and an out-of-range decision must
// answer -1 and leave the others judged.
func TestBatchMatchesSequentialCalls(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	batchSide, seqSide := prefix+"{batch}:", prefix+"{seq}:"
	batch := redis.NewScript(lua.BatchSourceAt())
	seq := redis.NewScript(lua.SourceAt())
	rng := rand.New(rand.NewPCG(12, 2026))
	now := time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC).UnixMicro()
	var decisions, admitted, denied, replayed, bad, sameKey int
	for round := range 400 {
		now += rng.Int64N(int64(4 * time.Minute / time.Microsecond))
		n := 1 + rng.IntN(24)
		ds := make([]batchDecision, n)
		seen := map[string]bool{}
		var keys []string
		var argv []any
		for i := range ds {
			ds[i] = randomBatchDecision(rng)
			if seen[ds[i].keys[0]] {
				sameKey++
			}
			seen[ds[i].keys[0]] = true
			keys = append(keys, ds[i].prefixed(batchSide)...)
			for _, a := range ds[i].argv {
				argv = append(argv, a)
			}
		}
		argv = append(argv, now/1e6, now%1e6)
		got, err := batch.Run(ctx, c, keys, argv...).Int64Slice()
		if err != nil {
			t.Fatalf("round %d: batch call: %v", round, err)
		}
		if len(got) != 5*n+1 || got[5*n] != now {
			t.Fatalf("round %d: batch reply %v for %d decisions at %d", round, got, n, now)
		}
		for i, d := range ds {
			reply := got[5*i : 5*i+5]
			decisions++
			if d.bad {
				bad++
				if !slices.Equal(reply, []int64{-1, 0, 0, 0, 0}) {
					t.Fatalf("round %d decision %d (out of range %v): batch answered %v, want -1 alone", round, i, d.argv, reply)
				}
				continue
			}
			args := make([]any, 0, len(d.argv)+2)
			for _, a := range d.argv {
				args = append(args, a)
			}
			want, err := seq.Run(ctx, c, d.prefixed(seqSide), append(args, now/1e6, now%1e6)...).Int64Slice()
			if err != nil {
				t.Fatalf("round %d decision %d: decide call: %v", round, i, err)
			}
			if !slices.Equal(reply, want[:5]) {
				t.Fatalf("round %d decision %d %v on %v: batch answered %v, its own decide call %v", round, i, d.argv, d.keys, reply, want)
			}
			switch {
			case reply[4] == 1:
				replayed++
			case reply[0] == 1:
				admitted++
			default:
				denied++
			}
		}
		for _, d := range ds {
			for i, k := range d.keys {
				a, errA := c.Get(ctx, batchSide+k).Result()
				b, errB := c.Get(ctx, seqSide+k).Result()
				if a != b || (errA == nil) != (errB == nil) {
					t.Fatalf("round %d: key %s holds %q (%v) after the batch, %q (%v) after the decide calls", round, d.keys[i], a, errA, b, errB)
				}
			}
		}
	}
	t.Logf("%d decisions: %d admitted, %d denied, %d replayed, %d out of range, %d on a key decided earlier in their batch",
		decisions, admitted, denied, replayed, bad, sameKey)
	if admitted < decisions/10 || denied < decisions/10 || replayed < decisions/20 || bad == 0 || sameKey < decisions/4 {
		t.Fatal("the rounds prove too little")
	}
}

// TestBatchWritesNothingWhenMalformed sends batch calls whose last decision
// is cut short and checks that the call fails as a whole before any write:
// the complete decisions before it leave no key.
func TestBatchWritesNothingWhenMalformed(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	batch := redis.NewScript(lua.Source(lua.Batch))
	good := []any{0, int(tollgate.TokenBucket), 10, 1_000_000, 10, 1, 4, 60_000, int(tollgate.GCRA), 10, 1_000_000, 10, 1}
	goodKeys := []string{prefix + "a:tb", prefix + "b:gcra", prefix + "b:gcra:r:x"}
	for _, tc := range []struct {
		name string
		keys []string
		argv []any
	}{
		{"arguments cut short", goodKeys, append(slices.Clone(good), 0, int(tollgate.TokenBucket), 10)},
		{"a marker missing", goodKeys, append(slices.Clone(good), 4, 60_000, int(tollgate.TokenBucket), 10, 1_000_000, 10, 1)},
		{"a key too many", append(slices.Clone(goodKeys), prefix+"extra"), good},
		{"a mode that is not a number", goodKeys, append(slices.Clone(good), "x", 0, 10, 1_000_000, 10, 1)},
		{"no decision", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := batch.Run(ctx, c, tc.keys, tc.argv...).Err()
			if err == nil || !strings.Contains(err.Error(), "tollgate batch") {
				t.Fatalf("malformed batch call answered %v, want the batch script's error", err)
			}
			n, err := c.Exists(ctx, append(slices.Clone(goodKeys), prefix+"extra")...).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d keys written by a batch call that failed", n)
			}
		})
	}
}

// TestBatchWriteErrorIsTheDecisionsOwn gives one decision of a batch a
// marker Redis cannot increment ("1.5", read as a count with replays left)
// and checks that this decision alone answers -2, writing nothing, while
// the decisions before and after it are admitted and written; the same
// decision as a decide call of its own fails as a whole.
func TestBatchWriteErrorIsTheDecisionsOwn(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	batch := redis.NewScript(lua.Source(lua.Batch))
	poisoned := prefix + "p:tb:r:x"
	if err := c.Set(ctx, poisoned, "1.5", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{prefix + "a:tb", prefix + "p:tb", poisoned, prefix + "c:tb"}
	tb := []any{int(tollgate.TokenBucket), 10, 1_000_000, 10, 3}
	argv := append(append(append(append([]any{0}, tb...), 4, 60_000), tb...), append([]any{0}, tb...)...)
	reply, err := batch.Run(ctx, c, keys, argv...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(reply) != 16 || reply[0] != 1 || reply[1] != 7 || !slices.Equal(reply[5:10], []int64{-2, 0, 0, 0, 0}) || reply[10] != 1 || reply[11] != 7 {
		t.Fatalf("reply %v, want the first and last admitted (7 left) and the poisoned one -2", reply)
	}
	for _, k := range []string{keys[0], keys[3]} {
		if c.Exists(ctx, k).Val() != 1 {
			t.Errorf("%s: an admitted decision of the batch left no state", k)
		}
	}
	if c.Exists(ctx, keys[1]).Val() != 0 || c.Get(ctx, poisoned).Val() != "1.5" {
		t.Errorf("the failed decision wrote: state exists %d, marker %q", c.Exists(ctx, keys[1]).Val(), c.Get(ctx, poisoned).Val())
	}
	if err := decide.Run(ctx, c, keys[1:3], append([]any{4, 60_000}, tb...)...).Err(); err == nil {
		t.Error("the same decision as a decide call of its own succeeded, want the INCR's error")
	}
}
