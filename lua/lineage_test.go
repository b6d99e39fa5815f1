package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// TestLineageSequenceOnEveryPath decides at pinned instants and checks the
// lineage each call leaves on its slot: the first call, the next one
// later, a clock that went back or stood still, two entries of one key in
// one call (one sequence for the call), a lineage another era wrote (a
// takeover), a sequence ahead of the clock, a lineage that cannot be read
// or is gone, and the calls that leave it alone: denied, a peek, and a
// call without an era. The sequence always grows, and a takeover is kept.
func TestLineageSequenceOnEveryPath(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	decideAt := redis.NewScript(lua.SourceAt())
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Hour, Burst: 100}
	p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: 1})
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixMicro()
	key := redistest.KeyPrefix(t) + "{lineage}:tb"
	lkey := redistest.KeyPrefix(t) + "{lineage}:lineage"
	const other = "0123456789ab"

	// decide runs one call of n entries on key at `at`, stamped with era
	// and costing cost each (the limit's capacity is 100), in mode (0 a
	// decision, -1 a peek), and returns the sequence each entry answered.
	decide := func(at int64, n int, era string, mode, cost int) []int64 {
		t.Helper()
		keys := make([]string, n)
		argv := []any{era, mode}
		for i := range n {
			keys[i] = key
			argv = append(argv, int(limit.Algorithm), p.Rate, p.Period, p.Capacity, cost)
		}
		r, err := decideAt.Run(ctx, c, append(keys, lkey), append(argv, at/1e6, at%1e6)...).Int64Slice()
		if err != nil || len(r) != 6*n+1 {
			t.Fatalf("decide at %d: %v %v", at, r, err)
		}
		seqs := make([]int64, n)
		for i := range n {
			seqs[i] = r[6*i+5]
		}
		return seqs
	}
	set := func(lin string) {
		t.Helper()
		if err := c.Set(ctx, lkey, lin, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	one := func(at int64) []int64 { return decide(at, 1, testEra, 0, 1) }
	for _, step := range []struct {
		name  string
		setup func()
		call  func() []int64
		want  []int64 // the sequences answered
		lin   string  // the lineage left
	}{
		{"the first call", nil, func() []int64 { return one(t0) }, []int64{t0}, fmt.Sprintf("%d %s", t0, testEra)},
		{"the next call, later", nil, func() []int64 { return one(t0 + 10) }, []int64{t0 + 10}, fmt.Sprintf("%d %s", t0+10, testEra)},
		{"a clock gone back", nil, func() []int64 { return one(t0 + 5) }, []int64{t0 + 11}, fmt.Sprintf("%d %s", t0+11, testEra)},
		{"a clock standing still", nil, func() []int64 { return one(t0 + 11) }, []int64{t0 + 12}, fmt.Sprintf("%d %s", t0+12, testEra)},
		{"two entries of one key in one call", nil, func() []int64 { return decide(t0+100, 2, testEra, 0, 1) },
			[]int64{t0 + 100, t0 + 100}, fmt.Sprintf("%d %s", t0+100, testEra)},
		{"denied: nothing written", nil, func() []int64 { return decide(t0+150, 1, testEra, 0, 100) }, []int64{0}, fmt.Sprintf("%d %s", t0+100, testEra)},
		{"a peek: nothing written", nil, func() []int64 { return decide(t0+160, 1, testEra, -1, 1) }, []int64{0}, fmt.Sprintf("%d %s", t0+100, testEra)},
		{"no era: the lineage left alone", nil, func() []int64 { return decide(t0+170, 1, "", 0, 1) }, []int64{0}, fmt.Sprintf("%d %s", t0+100, testEra)},
		{"a slot another era wrote", func() { set(fmt.Sprintf("%d %s", t0+150, other)) }, func() []int64 { return one(t0 + 200) },
			[]int64{t0 + 200}, fmt.Sprintf("%d %s %d %s", t0+200, testEra, t0+150, other)},
		{"the next call after a takeover keeps it", nil, func() []int64 { return one(t0 + 300) },
			[]int64{t0 + 300}, fmt.Sprintf("%d %s %d %s", t0+300, testEra, t0+150, other)},
		{"a sequence ahead of the clock", func() { set(fmt.Sprintf("%d %s", t0+1_000_000, testEra)) }, func() []int64 { return one(t0 + 400) },
			[]int64{t0 + 1_000_001}, fmt.Sprintf("%d %s", t0+1_000_001, testEra)},
		{"a lineage that cannot be read", func() { set("12ab " + testEra) }, func() []int64 { return one(t0 + 500) },
			[]int64{t0 + 500}, fmt.Sprintf("%d %s", t0+500, testEra)},
		{"a lineage gone", func() { c.Del(ctx, lkey) }, func() []int64 { return one(t0 + 600) },
			[]int64{t0 + 600}, fmt.Sprintf("%d %s", t0+600, testEra)},
	} {
		if step.setup != nil {
			step.setup()
		}
		got := step.call()
		if lin := c.Get(ctx, lkey).Val(); fmt.Sprint(got) != fmt.Sprint(step.want) || lin != step.lin {
			t.Errorf("%s: answered sequences %v, lineage %q; want %v, %q", step.name, got, lin, step.want, step.lin)
		}
	}
	if s := c.Get(ctx, key).Val(); strings.Contains(s, "|") || strings.Contains(s, testEra) {
		t.Errorf("the state %q carries lineage; want the algorithm's numbers alone", s)
	}

	// The lineage's TTL: set (30 minutes) by a slot's first call and by
	// the first of each 10 minutes, kept by the others.
	const bucket = 600_000_000 // 10 minutes in µs
	b0 := (t0/bucket + 1) * bucket
	pttl := func() time.Duration { return c.PTTL(ctx, lkey).Val() }
	if err := c.Set(ctx, lkey, fmt.Sprintf("%d %s", b0+1, testEra), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	one(b0 + 5)
	if ttl := pttl(); ttl > time.Minute {
		t.Errorf("a call within the 10 minutes of the last: TTL %v, want the 1 minute kept", ttl)
	}
	one(b0 + bucket + 5)
	if ttl := pttl(); ttl <= 29*time.Minute || ttl > 30*time.Minute {
		t.Errorf("the first call of the next 10 minutes: TTL %v, want 30 minutes", ttl)
	}
}
