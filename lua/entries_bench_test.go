package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// BenchmarkEntriesServerCost measures what Redis spends (µs per call, from
// INFO commandstats) on a decide call of one entry and of two entries on two
// keys of one identity (a call under two limits), and on the same calls by
// a copy of the decide script whose SETs do nothing: the second entry's
// cost without any write is a floor under what a call of two limits could
// cost whatever the state's layout, since a layout can only save the second
// limit's key and write, not its arguments and its arithmetic. Rounds of
// 2000 pipelined calls over 1000 identities alternate the four; quotas are
// large and slow to refill, so that states stay live. Each reports its
// median µs per call, and the two-entry calls their median per-round ratio
// to the one-entry call of the same script:
//
//	go test -run '^$' -bench EntriesServerCost -benchtime 10x ./lua/
func BenchmarkEntriesServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	ctx := context.Background()
	src := lua.Decide.Source()
	noWrites := "local function nop() end\n" + strings.ReplaceAll(src, "call('SET', ", "nop('SET', ")
	if noWrites == "local function nop() end\n"+src {
		b.Fatal("the decide script no longer writes with call('SET', ...")
	}
	scripts := []*redis.Script{redis.NewScript(src), redis.NewScript(noWrites)}
	for _, s := range scripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	entry := func(l tollgate.Limit) []any {
		p := algo.ParamsOf(tollgate.Request{Limit: l, Cost: 1})
		return []any{int64(l.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost}
	}
	first := entry(tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Second, Burst: 100_000})
	second := entry(tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Hour, Burst: 100_000})
	names := []string{"one", "two", "one-no-writes", "two-no-writes"}
	perCall := make([][]float64, len(names))
	var ratios [2][]float64
	seq := 0
	for b.Loop() {
		var round [4]float64
		for v := range names {
			s, two := scripts[v/2], v%2 == 1
			_, usec0 := evalshaStats(b, srv)
			pipe := c.Pipeline()
			for range 2000 {
				seq++
				id := "{g-" + strconv.Itoa(seq%1000) + "}"
				if two {
					s.EvalSha(ctx, pipe, withLineage(id+"/s:tb", id+"/h:tb"), append(append([]any{testEra, 0}, first...), second...)...)
				} else {
					s.EvalSha(ctx, pipe, withLineage(id+"/s:tb"), append([]any{testEra, 0}, first...)...)
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			_, usec1 := evalshaStats(b, srv)
			round[v] = float64(usec1-usec0) / 2000
			perCall[v] = append(perCall[v], round[v])
		}
		ratios[0] = append(ratios[0], round[1]/round[0])
		ratios[1] = append(ratios[1], round[3]/round[0])
	}
	median := func(v []float64) float64 { m, _, _ := spread(v); return m }
	for v, name := range names {
		b.ReportMetric(median(perCall[v]), name+"-µs/call")
	}
	b.ReportMetric(median(ratios[0]), "two÷one")
	b.ReportMetric(median(ratios[1]), "two-no-writes÷one")
	for i, r := range ratios {
		m, lo, hi := spread(r)
		b.Logf("%s ÷ one: median %.2f (%.2f–%.2f) over %d rounds", names[2*i+1], m, lo, hi, len(r))
	}
}
