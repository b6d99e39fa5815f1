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
	"github.com/tollgate/tollgate/internal/lua"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestLineageSequenceOnEveryPath decides at pinned instants and checks the
// lineage each write leaves: the first write, the next one later, a clock
// that went back or stood still, two writes of one key in one call, a
// lineage another era wrote (a takeover), a sequence ahead of the clock,
// and a lineage that cannot be read. The sequence always grows, and a takeover is kept.
func TestLineageSequenceOnEveryPath(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	decideAt := redis.NewScript(lua.SourceAt())
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Hour, Burst: 100}
	p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: 1})
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixMicro()
	key := redistest.KeyPrefix(t) + "{lineage}:tb"
	const other = "0123456789ab"

	// decide runs one call of n entries on key at `at` and returns the
	// sequence each entry wrote.
	decide := func(at int64, n int) []int64 {
		t.Helper()
		keys := make([]string, n)
		argv := []any{testEra, 0}
		for i := range n {
			keys[i] = key
			argv = append(argv, int(limit.Algorithm), p.Rate, p.Period, p.Capacity, 1)
		}
		r, err := decideAt.Run(ctx, c, keys, append(argv, at/1e6, at%1e6)...).Int64Slice()
		if err != nil || len(r) < 6*n {
			t.Fatalf("decide at %d: %v %v", at, r, err)
		}
		seqs := make([]int64, n)
		for i := range n {
			if r[6*i] != 1 {
				t.Fatalf("decide at %d: entry %d denied: %v", at, i, r)
			}
			seqs[i] = r[6*i+5]
		}
		return seqs
	}
	lineage := func() string {
		t.Helper()
		s, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, lin, _ := strings.Cut(s, "|")
		return lin
	}
	set := func(lin string) {
		t.Helper()
		if err := c.Set(ctx, key, fmt.Sprintf("90 %d|%s", t0, lin), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		name  string
		setup func()
		at    int64
		n     int
		want  []int64 // the sequences written
		lin   string  // the lineage left
	}{
		{"the first write", nil, t0, 1, []int64{t0}, fmt.Sprintf("%d %s", t0, testEra)},
		{"the next write, later", nil, t0 + 10, 1, []int64{t0 + 10}, fmt.Sprintf("%d %s", t0+10, testEra)},
		{"a clock gone back", nil, t0 + 5, 1, []int64{t0 + 11}, fmt.Sprintf("%d %s", t0+11, testEra)},
		{"a clock standing still", nil, t0 + 11, 1, []int64{t0 + 12}, fmt.Sprintf("%d %s", t0+12, testEra)},
		{"two writes of one key in one call", nil, t0 + 100, 2, []int64{t0 + 100, t0 + 101}, fmt.Sprintf("%d %s", t0+101, testEra)},
		{"a key another era wrote", func() { set(fmt.Sprintf("%d %s", t0+150, other)) }, t0 + 200, 1,
			[]int64{t0 + 200}, fmt.Sprintf("%d %s %d %s", t0+200, testEra, t0+150, other)},
		{"the next write after a takeover keeps it", nil, t0 + 300, 1,
			[]int64{t0 + 300}, fmt.Sprintf("%d %s %d %s", t0+300, testEra, t0+150, other)},
		{"a sequence ahead of the clock", func() { set(fmt.Sprintf("%d %s", t0+1_000_000, testEra)) }, t0 + 400, 1,
			[]int64{t0 + 1_000_001}, fmt.Sprintf("%d %s", t0+1_000_001, testEra)},
		{"a lineage that cannot be read", func() { set("12ab " + testEra) }, t0 + 500, 1,
			[]int64{t0 + 500}, fmt.Sprintf("%d %s", t0+500, testEra)},
		{"a state without lineage", func() { c.Set(ctx, key, fmt.Sprintf("90 %d", t0), time.Hour) }, t0 + 600, 1,
			[]int64{t0 + 600}, fmt.Sprintf("%d %s", t0+600, testEra)},
	} {
		if step.setup != nil {
			step.setup()
		}
		got := decide(step.at, step.n)
		if fmt.Sprint(got) != fmt.Sprint(step.want) || lineage() != step.lin {
			t.Errorf("%s: wrote sequences %v, lineage %q; want %v, %q", step.name, got, lineage(), step.want, step.lin)
		}
	}
}
