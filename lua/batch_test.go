package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/batchreply"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// batchDecision is one decision of a batch script call: its decide call's
// KEYS and ARGV, on a key name without its side's prefix. batchArgs lays
// the ARGV of several out as the batch script's.
type batchDecision struct {
	keys []string // state, then marker when max_replays > 0, without prefix
	argv []int64  // max_replays, replay TTL (max_replays > 0), algorithm, rate, period, capacity, cost
	bad  bool     // out of range: the batch answers -1 and no decide call is made
}

func (d batchDecision) prefixed(prefix string) []string {
	out := make([]string, len(d.keys))
	for i, k := range d.keys {
		out[i] = prefix + k
	}
	return out
}

// limit returns the decision's algorithm, rate, period and capacity.
func (d batchDecision) limit() [4]int64 {
	h := len(d.argv) - 5
	return [4]int64(d.argv[h : h+4])
}

// profile returns the decision's profile as the batch script takes it:
// max_replays, replay TTL (0 without a request id), algorithm, rate, period,
// capacity, cost.
func (d batchDecision) profile() [7]int64 {
	p := [7]int64{d.argv[0]}
	if d.argv[0] > 0 {
		p[1] = d.argv[1]
	}
	copy(p[2:], d.argv[len(d.argv)-5:])
	return p
}

// batchArgs returns the batch script's ARGV for ds (lua/doc.go): their
// distinct profiles in the order of first use, then each decision's
// profile (1-based); or, inline, 0 and each decision's profile in turn, as
// its decide call's ARGV. It also returns the number of distinct profiles.
func batchArgs(ds []batchDecision, inline bool) ([]any, int) {
	var profiles [][7]int64
	var places []any
	for _, d := range ds {
		p := slices.Index(profiles, d.profile())
		if p < 0 {
			profiles = append(profiles, d.profile())
			p = len(profiles) - 1
		}
		places = append(places, p+1)
	}
	if inline {
		argv := []any{testEra, 0}
		for _, d := range ds {
			for _, a := range d.argv {
				argv = append(argv, a)
			}
		}
		return argv, len(profiles)
	}
	argv := []any{testEra, len(profiles)}
	for _, p := range profiles {
		for _, v := range p {
			argv = append(argv, v)
		}
	}
	return append(argv, places...), len(profiles)
}

// inlineAsTheStore reports whether the store sends ds inline: when they
// share too few profiles, fewer than two decisions per profile.
func inlineAsTheStore(ds []batchDecision) bool {
	_, profiles := batchArgs(ds, false)
	return 2*profiles > len(ds)
}

// distinctLimits counts the distinct limits of ds.
func distinctLimits(ds []batchDecision) int {
	var limits [][4]int64
	for _, d := range ds {
		if !slices.Contains(limits, d.limit()) {
			limits = append(limits, d.limit())
		}
	}
	return len(limits)
}

// badLimits are limits no algorithm can judge (a rate of 0, an unknown
// algorithm, a calendar period for a bucket), each drawn by several
// decisions of one batch now and then.
var badLimits = [][4]int64{
	{int64(tollgate.TokenBucket), 0, 1_000_000, 10},
	{4, 10, 1_000_000, 10},
	{int64(tollgate.GCRA), 10, -1, 10},
}

// randomBatchDecision draws a decision on one of a few identities, so that
// a batch often holds several decisions on one key, with or without one of
// a few request ids, sometimes a peek, rarely out of range: its cost, its
// replay TTL or its limit, one of badLimits.
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
		d.argv = []int64{2, []int64{600_000, 90_000}[rng.IntN(2)]}
		d.keys = append(d.keys, fmt.Sprintf("%s:r:req%d", d.keys[0], rng.IntN(4)))
	}
	d.argv = append(d.argv, int64(alg), p.Rate, p.Period, p.Capacity, p.Cost)
	switch rng.IntN(60) {
	case 0, 1:
		d.argv[len(d.argv)-1] = p.Capacity + 1 // cost above capacity
		d.bad = true
	case 2:
		if d.argv[0] > 0 {
			d.argv[1] = 0 // a marker that would not live
			d.bad = true
		}
	case 3, 4:
		lim := badLimits[rng.IntN(len(badLimits))]
		copy(d.argv[len(d.argv)-5:], lim[:])
		d.argv[len(d.argv)-1] = 1
		d.bad = true
	}
	return d
}

// batchAgainstDecide runs ds as one batch script call (batch, on keys
// under batchSide) and as one decide call each (seq, under seqSide), in
// order, at the instant now, and fails t unless every decision's reply and
// every key it names are the same both ways, and every decision out of
// range answered -1 alone; what names the call in its messages, inline
// chooses the batch call's layout. It returns the batch's replies.
func batchAgainstDecide(t *testing.T, what string, c *redis.Client, batch, seq *redis.Script, batchSide, seqSide string, ds []batchDecision, inline bool, now int64) [][]int64 {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for _, d := range ds {
		keys = append(keys, d.prefixed(batchSide)...)
	}
	keys = append(keys, batchSide+"lineage")
	argv, _ := batchArgs(ds, inline)
	argv = append(argv, now/1e6, now%1e6)
	got, err := batch.Run(ctx, c, keys, argv...).Int64Slice()
	if err != nil {
		t.Fatalf("%s: batch call: %v", what, err)
	}
	n := len(ds)
	replies := decodeBatch(t, what, got, n)
	if got[len(got)-1] != now {
		t.Fatalf("%s: batch reply %v for %d decisions at %d", what, got, n, now)
	}
	for i, d := range ds {
		reply := replies[i]
		if d.bad {
			if !slices.Equal(reply, []int64{-1, 0, 0, 0, 0, 0}) {
				t.Fatalf("%s decision %d (out of range %v): batch answered %v, want -1 alone", what, i, d.argv, reply)
			}
			continue
		}
		args := make([]any, 0, len(d.argv)+3)
		args = append(args, testEra)
		for _, a := range d.argv {
			args = append(args, a)
		}
		want, err := seq.Run(ctx, c, append(d.prefixed(seqSide), seqSide+"lineage"), append(args, now/1e6, now%1e6)...).Int64Slice()
		if err != nil {
			t.Fatalf("%s decision %d: decide call: %v", what, i, err)
		}
		// The same answer, and a sequence written by the same decisions:
		// the batch call's own, once, and each decide call its own.
		if !slices.Equal(reply[:5], want[:5]) || (reply[5] == 0) != (want[5] == 0) || reply[5] != 0 && reply[5] != got[len(got)-2] {
			t.Fatalf("%s decision %d %v on %v: batch answered %v (its call at sequence %d), its own decide call %v", what, i, d.argv, d.keys, reply, got[len(got)-2], want)
		}
	}
	for _, d := range ds {
		for i, k := range d.keys {
			a, errA := c.Get(ctx, batchSide+k).Result()
			b, errB := c.Get(ctx, seqSide+k).Result()
			if a != b || (errA == nil) != (errB == nil) {
				t.Fatalf("%s: key %s holds %q (%v) after the batch, %q (%v) after the decide calls", what, d.keys[i], a, errA, b, errB)
			}
			// The TTLs were set from the same pinned instant, but Redis
			// counts them down in real time, and the decide calls ran a
			// little later.
			ttlA, ttlB := c.PTTL(ctx, batchSide+k).Val(), c.PTTL(ctx, seqSide+k).Val()
			if ttlA < 0 != (ttlB < 0) || max(ttlA-ttlB, ttlB-ttlA) > 2*time.Second {
				t.Fatalf("%s: key %s lives %v after the batch, %v after the decide calls", what, d.keys[i], ttlA, ttlB)
			}
		}
	}
	return replies
}

// TestBatchMatchesSequentialCalls is the batch script's differential test:
// random batches of decisions (several on one key, several limits and
// profiles, repeated request ids, peeks, a decision or a limit out of range
// now and then), every other one inline, run
// as one batch script call on one side and as one decide call each, in the
// same order, at the same pinned instant, on the other. Every decision's
// reply, every stored state and marker must be identical, and a decision
// out of range (its own or its limit's numbers) must answer -1 and leave
// the others judged.
func TestBatchMatchesSequentialCalls(t *testing.T) {
	c := redistest.Single(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	batch := redis.NewScript(lua.BatchSourceAt())
	seq := redis.NewScript(lua.SourceAt())
	rng := rand.New(rand.NewPCG(12, 2026))
	now := time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC).UnixMicro()
	var decisions, admitted, denied, replayed, bad, sameKey, manyLimits, sharedBad, inlined int
	for round := range 400 {
		now += rng.Int64N(int64(4 * time.Minute / time.Microsecond))
		n := 1 + rng.IntN(24)
		ds := make([]batchDecision, n)
		seen := map[string]bool{}
		badUses := map[[4]int64]int{}
		for i := range ds {
			ds[i] = randomBatchDecision(rng)
			if seen[ds[i].keys[0]] {
				sameKey++
			}
			seen[ds[i].keys[0]] = true
			if slices.Contains(badLimits, ds[i].limit()) {
				badUses[ds[i].limit()]++
				if badUses[ds[i].limit()] == 2 {
					sharedBad++
				}
			}
		}
		if distinctLimits(ds) > 1 {
			manyLimits++
		}
		inline := round%2 == 1 // both layouts, whatever the store would choose
		if inline {
			inlined++
		}
		replies := batchAgainstDecide(t, fmt.Sprintf("round %d", round), c, batch, seq, prefix+"{batch}:", prefix+"{seq}:", ds, inline, now)
		for i, reply := range replies {
			decisions++
			switch {
			case ds[i].bad:
				bad++
			case reply[4] == 1:
				replayed++
			case reply[0] == 1:
				admitted++
			default:
				denied++
			}
		}
	}
	t.Logf("%d decisions: %d admitted, %d denied, %d replayed, %d out of range, %d on a key decided earlier in their batch; "+
		"%d calls of several limits, %d with a limit out of range shared by several decisions, %d of 400 inline",
		decisions, admitted, denied, replayed, bad, sameKey, manyLimits, sharedBad, inlined)
	if admitted < decisions/10 || denied < decisions/10 || replayed < decisions/20 || bad == 0 || sameKey < decisions/4 ||
		manyLimits < 300 || sharedBad == 0 {
		t.Fatal("the rounds prove too little")
	}
}

// TestBatchSharesProfiles sends one call of decisions on four distinct
// limits (one of them a calendar window) and ten distinct profiles,
// interleaved so that each limit's decisions are apart, one with a limit out
// of range shared by three decisions of two profiles beside good ones, and
// one whose six decisions share one profile, each with profiles and inline:
// each decision must answer as its own decide call, every decision of the
// bad limit -1 alone, as must the one decision whose cost exceeds its
// (good) limit's capacity.
func TestBatchSharesProfiles(t *testing.T) {
	c := redistest.Single(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	batch := redis.NewScript(lua.BatchSourceAt())
	seq := redis.NewScript(lua.SourceAt())
	now := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC).UnixMicro()
	decision := func(key string, limit tollgate.Limit, cost int64, id string) batchDecision {
		p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: min(cost, limit.Capacity())})
		d := batchDecision{keys: []string{key + ":" + limit.Algorithm.String()}, argv: []int64{0}}
		if id != "" {
			d.keys = append(d.keys, d.keys[0]+":r:"+id)
			d.argv = []int64{3, 60_000}
		}
		d.argv = append(d.argv, int64(limit.Algorithm), p.Rate, p.Period, p.Capacity, cost)
		d.bad = cost > limit.Capacity()
		return d
	}
	tb := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 10, Period: time.Second}
	gcra := tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 3, Period: time.Minute, Burst: 2}
	sw := tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 4, Period: time.Hour}
	daily := tollgate.Daily(2)
	// check runs ds in both layouts, on keys of their own, and returns the
	// replies (the same both ways).
	check := func(what string, ds []batchDecision, limits, profiles int) [][]int64 {
		t.Helper()
		argv, p := batchArgs(ds, false)
		if l := distinctLimits(ds); l != limits || p != profiles || len(argv) != 2+7*profiles+len(ds) {
			t.Fatalf("%s: %d limits, %d profiles in %d arguments, want %d, %d in %d", what, l, p, len(argv), limits, profiles, 2+7*profiles+len(ds))
		}
		replies := batchAgainstDecide(t, what, c, batch, seq, prefix+"{batch}:", prefix+"{seq}:", ds, false, now)
		inline := batchAgainstDecide(t, what+", inline", c, batch, seq, prefix+"{inline}:", prefix+"{inline-seq}:", ds, true, now)
		if !slices.EqualFunc(replies, inline, slices.Equal) {
			t.Fatalf("%s: %v with profiles, %v inline", what, replies, inline)
		}
		return replies
	}

	ds := []batchDecision{
		decision("a", tb, 4, ""), decision("b", gcra, 1, "x"), decision("a", sw, 3, ""), decision("c", daily, 1, ""),
		decision("a", tb, 4, "y"), decision("b", gcra, 1, ""), decision("a", sw, 2, "y"), decision("c", daily, 1, "x"),
		decision("a", tb, 4, ""), decision("b", gcra, 1, "x"), decision("d", sw, 5, ""), decision("c", daily, 1, ""),
		decision("a", tb, 1, "y"),
	}
	replies := check("four limits", ds, 4, 10)
	var outcomes []int64
	for _, r := range replies {
		outcomes = append(outcomes, r[0]+r[4])
	}
	// tb: 10 - 4 - 4, then 4 denied, then id y's replay; gcra: a burst of
	// 2, then id x's replay; sw: 4 - 3, then 2 denied, and d's 5 out of
	// range; daily: 2, then denied.
	if want := []int64{1, 1, 1, 1, 1, 1, 0, 1, 0, 2, -1, 0, 2}; !slices.Equal(outcomes, want) {
		t.Errorf("allowed + replayed per decision %v, want %v", outcomes, want)
	}

	bad := decision("e", tb, 1, "")
	copy(bad.argv[1:5], badLimits[0][:])
	bad.bad = true
	badID := decision("f", tb, 1, "z")
	copy(badID.argv[2:6], badLimits[0][:])
	badID.bad = true
	ds = []batchDecision{bad, decision("e", tb, 1, ""), badID, decision("f", gcra, 1, "z"), bad}
	for i, r := range check("a bad limit shared", ds, 3, 4) {
		if want := ds[i].bad; (r[0] == -1) != want {
			t.Errorf("decision %d answered %v; out of range: %v", i, r, want)
		}
	}

	ds = nil
	for i := range 6 {
		ds = append(ds, decision("g"+strconv.Itoa(i%4), gcra, 2, "")) // the whole burst
	}
	for i, r := range check("one profile", ds, 1, 1) {
		if want := int64(1 - i/4); r[0] != want {
			t.Errorf("decision %d of one profile answered %v, want allowed %d", i, r, want)
		}
	}
}

// TestBatchWritesNothingWhenMalformed sends batch calls whose arguments do
// not make profiles and whole decisions (a key missing or too many, a
// max_replays that is not one, a decision naming no profile of the call) and checks
// that each fails as a whole before any write: the complete decisions in it
// leave no key.
func TestBatchWritesNothingWhenMalformed(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	batch := redis.NewScript(lua.Batch.Source())
	tb := []any{int(tollgate.TokenBucket), 10, 1_000_000, 10, 1}
	gcra := []any{int(tollgate.GCRA), 10, 1_000_000, 10, 1}
	profiles := append(append([]any{testEra, 2, 0, 0}, tb...), append([]any{4, 60_000}, gcra...)...)
	good := append(slices.Clone(profiles), 1, 2)
	inline := append(append([]any{testEra, 0, 0}, tb...), append([]any{0}, gcra...)...) // keys goodKeys[:2]
	goodKeys := []string{prefix + "a:tb", prefix + "b:gcra", prefix + "b:gcra:r:x"}
	extraKey := append(slices.Clone(goodKeys), prefix+"extra")
	// The cases below differ from these whole calls only where named.
	if err := batch.Run(ctx, c, withLineage(prefix+"probe"), append(slices.Clone(profiles), 1)...).Err(); err != nil {
		t.Fatalf("a whole call failed: %v", err)
	}
	if err := batch.Run(ctx, c, withLineage(prefix+"probe", prefix+"probe2"), inline...).Err(); err != nil {
		t.Fatalf("a whole call failed: %v", err)
	}
	with := func(argv []any, i int, v any) []any {
		argv = slices.Clone(argv)
		argv[i] = v
		return argv
	}
	const (
		keysWrong      = "do not make whole decisions"
		noMode         = "has no mode"
		noProfile      = "names no profile"
		argumentsWrong = "do not hold profiles and decisions"
		inlineWrong    = "arguments do not make whole decisions"
	)
	for _, tc := range []struct {
		name string
		keys []string
		argv []any
		want string // in the error
	}{
		{"a marker missing", goodKeys, append(slices.Clone(good), 2), keysWrong},
		{"a key too many", extraKey, good, keysWrong},
		{"a max_replays that is not a number", goodKeys, with(good, 9, "x"), noMode},
		{"a max_replays below -1", goodKeys, with(good, 2, -2), noMode},
		{"a decision naming profile 0", extraKey, append(slices.Clone(good), 0), noProfile},
		{"a decision naming a profile past the last", extraKey, append(slices.Clone(good), 3), noProfile},
		{"a decision naming no number", extraKey, append(slices.Clone(good), "x"), noProfile},
		{"a decision naming its profile not in decimal", extraKey, append(slices.Clone(good), "1.0"), noProfile},
		{"a profile cut short", goodKeys, append(slices.Clone(profiles[:15]), 1, 2), keysWrong},
		{"more profiles than arguments", goodKeys, with(good, 1, 3), argumentsWrong},
		{"inline: a decision cut short", goodKeys[:2], append(slices.Clone(inline), 0, tb[0], tb[1]), inlineWrong},
		{"inline: a decision with its max_replays alone", goodKeys[:2], append(slices.Clone(inline), 0), inlineWrong},
		{"inline: a decision of a TTL alone", goodKeys[:2], append(slices.Clone(inline), 4, 60_000), inlineWrong},
		{"inline: a marker missing", goodKeys[:1], append([]any{testEra, 0, 4, 60_000}, tb...), keysWrong},
		{"inline: a key too many", extraKey, append(slices.Clone(inline), 0), keysWrong},
		{"inline: a max_replays that is not a number", goodKeys[:2], with(inline, 8, "x"), noMode},
		{"inline and no decision", nil, []any{testEra, 0}, argumentsWrong},
		{"profiles and no decision", nil, profiles, argumentsWrong},
		{"no argument", goodKeys, []any{testEra}, argumentsWrong},
		{"no decision", nil, nil, argumentsWrong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys != nil {
				keys = withLineage(keys...)
			}
			err := batch.Run(ctx, c, keys, tc.argv...).Err()
			if err == nil || !strings.Contains(err.Error(), "tollgate batch") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("malformed batch call answered %v, want the batch script's error saying %q", err, tc.want)
			}
			n, err := c.Exists(ctx, withLineage(extraKey...)...).Result()
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
	batch := redis.NewScript(lua.Batch.Source())
	poisoned := prefix + "p:tb:r:x"
	if err := c.Set(ctx, poisoned, "1.5", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{prefix + "a:tb", prefix + "p:tb", poisoned, prefix + "c:tb"}
	tb := []any{int(tollgate.TokenBucket), 10, 1_000_000, 10, 3}
	argv := append(append(append([]any{testEra, 2, 0, 0}, tb...), append([]any{4, 60_000}, tb...)...), 1, 2, 1)
	got, err := batch.Run(ctx, c, withLineage(keys...), argv...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	reply := decodeBatch(t, "batch", got, 3)
	if reply[0][0] != 1 || reply[0][1] != 7 || !slices.Equal(reply[1], []int64{-2, 0, 0, 0, 0, 0}) || reply[2][0] != 1 || reply[2][1] != 7 {
		t.Fatalf("reply %v (%v), want the first and last admitted (7 left) and the poisoned one -2", reply, got)
	}
	for _, k := range []string{keys[0], keys[3]} {
		if c.Exists(ctx, k).Val() != 1 {
			t.Errorf("%s: an admitted decision of the batch left no state", k)
		}
	}
	if c.Exists(ctx, keys[1]).Val() != 0 || c.Get(ctx, poisoned).Val() != "1.5" {
		t.Errorf("the failed decision wrote: state exists %d, marker %q", c.Exists(ctx, keys[1]).Val(), c.Get(ctx, poisoned).Val())
	}
	if err := decide.Run(ctx, c, withLineage(keys[1:3]...), append([]any{testEra, 4, 60_000}, tb...)...).Err(); err == nil {
		t.Error("the same decision as a decide call of its own succeeded, want the INCR's error")
	}
}

// decodeBatch decodes a batch script reply of n decisions with
// batchreply.Decision into each decision's six integers, as its decide call
// would answer them, and fails t unless the reply is exactly n answers and
// the server time.
func decodeBatch(t *testing.T, what string, reply []int64, n int) [][]int64 {
	t.Helper()
	out := make([][]int64, n)
	next := 0
	for i := range n {
		d, nx, ok := batchreply.Decision(reply, next)
		if !ok {
			t.Fatalf("%s: batch reply %v: decision %d of %d does not decode at %d", what, reply, i, n, next)
		}
		out[i], next = d[:], nx
	}
	if next != len(reply)-batchreply.Tail {
		t.Fatalf("%s: batch reply %v: %d decisions end at %d, not before the sequence and the server time", what, reply, n, next)
	}
	return out
}
