package lua_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// BenchmarkScriptServerCost measures what Redis spends per script call (µs,
// from INFO commandstats: cmdstat_evalsha's usec over its calls) on
// ordinary limits, for each algorithm, on a private server. With
// TOLLGATE_BASELINE_LUA naming a directory holding another version's *.lua
// files, it loads that version's decide script beside the current one and
// alternates batches of the two (which goes first alternates too), so that
// both are measured in the same run on the same server; each reports the
// median batch over the benchmark's iterations (use -benchtime=5x or more),
// and it logs the median, lowest and highest of the per-batch ratios
// current ÷ baseline. A baseline is assembled as its lua.go did: from
// decide.lua and its parts (lua.SourceIn); from prelude.lua, entry.lua,
// arith.lua, the four <algorithm>.lua blocks and main.lua (before
// decide.lua); or, without entry.lua, as one script per algorithm taking
// rate, period, capacity and cost. For example, against the version of
// commit bd7d069:
//
//	mkdir -p /tmp/lua-base && for f in $(git ls-tree --name-only bd7d069 lua/ | grep '[.]lua$'); do
//	  git show bd7d069:$f > /tmp/lua-base/${f#lua/}; done
//	TOLLGATE_BASELINE_LUA=/tmp/lua-base go test -run '^$' -bench ScriptServerCost -benchtime 7x ./lua/
func BenchmarkScriptServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	base := os.Getenv("TOLLGATE_BASELINE_LUA")
	for _, alg := range algorithms {
		b.Run(alg.String(), func(b *testing.B) {
			scripts := []costScript{{"current", redis.NewScript(lua.Decide.Source()), []any{testEra, 0}, true}}
			if base != "" {
				scripts = append(scripts, baselineScript(b, base, alg))
			}
			for _, s := range scripts {
				if err := s.script.Load(context.Background(), c).Err(); err != nil {
					b.Fatal(err)
				}
			}
			// Batches of the scripts alternate, so that both see the same
			// load on a shared machine; the median batch is the figure.
			perCall := make([][]float64, len(scripts))
			round := 0
			for b.Loop() {
				for batch := range costBatches {
					round++
					for j := range scripts {
						i := (j + round) % len(scripts) // alternate which goes first
						perCall[i] = append(perCall[i], serverCost(b, srv, c, scripts[i], alg, batch))
					}
				}
			}
			for i, s := range scripts {
				m, lo, hi := spread(perCall[i])
				b.ReportMetric(m, s.name+"-µs/call")
				b.Logf("%s: median %.2f µs per call (%.2f–%.2f)", s.name, m, lo, hi)
			}
			if len(scripts) > 1 {
				var ratios []float64
				lower := 0
				for r, x := range perCall[1] {
					ratios = append(ratios, perCall[0][r]/x)
					if ratios[r] < 1 {
						lower++
					}
				}
				m, lo, hi := spread(ratios)
				b.Logf("current÷baseline per batch: median %.3f (%.3f–%.3f), below 1 in %d of %d", m, lo, hi, lower, len(ratios))
			}
		})
	}
}

// costScript is a script to measure and its calling convention: the
// arguments before a decide script's entry (the era and max_replays; in
// earlier versions max_replays alone, or with a marker TTL), or nil for the
// older one script per algorithm; and whether it takes its slot's lineage
// key as its last KEYS.
type costScript struct {
	name    string
	script  *redis.Script
	header  []any
	lineage bool
}

// costBatches is how many batches of costBatchSize calls each script makes
// per benchmark iteration: over 1000 identities, so that buckets empty and
// refill and about half the calls are admitted.
const costBatches, costBatchSize = 20, 500

// serverCost runs one batch (a pipeline) of s on ordinary limits (100/s
// with a burst of 100, cost 1) and returns the server's µs per call.
func serverCost(b *testing.B, srv *redistest.Server, c *redis.Client, s costScript, alg tollgate.Algorithm, batch int) float64 {
	ctx := context.Background()
	calls0, usec0 := evalshaStats(b, srv)
	pipe := c.Pipeline()
	for i := range costBatchSize {
		key := fmt.Sprintf("{%s-%s-%d}:s", s.name, alg, (batch*costBatchSize+i)%1000)
		keys := []string{key}
		if s.lineage {
			keys = withLineage(key)
		}
		if s.header != nil {
			s.script.EvalSha(ctx, pipe, keys, append(s.header, int(alg), 100, time.Second.Microseconds(), 100, 1)...)
		} else {
			s.script.EvalSha(ctx, pipe, []string{key}, 100, time.Second.Microseconds(), 100, 1)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	calls1, usec1 := evalshaStats(b, srv)
	return float64(usec1-usec0) / float64(calls1-calls0)
}

// spread returns the median of v and its lowest and highest values, as
// the benchmarks of this package report their rounds.
func spread(v []float64) (median, lo, hi float64) {
	v = slices.Sorted(slices.Values(v))
	return v[len(v)/2], v[0], v[len(v)-1]
}

func evalshaStats(b *testing.B, srv *redistest.Server) (calls, usec int64) {
	for _, field := range strings.Split(srv.Info(b, "commandstats", "cmdstat_evalsha"), ",") {
		name, value, _ := strings.Cut(field, "=")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "calls":
			calls = n
		case "usec":
			usec = n
		}
	}
	return calls, usec
}

// baselineScript assembles the baseline's decide script as its lua.go did:
// with decide.lua, as lua.go does now; with entry.lua, one decide script
// of prelude.lua, entry.lua, arith.lua, the blocks chosen by the entry's
// algorithm and main.lua; without either, one script of alg's block.
func baselineScript(b *testing.B, dir string, alg tollgate.Algorithm) costScript {
	read := func(name string, optional bool) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !(optional && os.IsNotExist(err)) {
			b.Fatal(err)
		}
		return string(data)
	}
	if d := read("decide.lua", true); d != "" {
		src, err := lua.SourceIn(dir, lua.Decide)
		if err != nil {
			b.Fatal(err)
		}
		// A version that reads an era takes one, as the current script
		// does; one with a lineage key of its slot takes that too.
		header := []any{0}
		if strings.Contains(d, "local era = ARGV[1]") {
			header = []any{testEra, 0}
		}
		return costScript{"baseline", redis.NewScript(src), header, strings.Contains(d, "lineage key")}
	}
	entry := read("entry.lua", true)
	if entry == "" {
		src := read("prelude.lua", false) + read("arith.lua", true) + read(alg.String()+".lua", false) + read("main.lua", false)
		return costScript{"baseline", redis.NewScript(src), nil, false}
	}
	blocks := ""
	for i, a := range algorithms {
		if i > 0 {
			blocks += "else"
		}
		blocks += fmt.Sprintf("if alg == %d then\n%s", i, read(a.String()+".lua", false))
	}
	prelude := read("prelude.lua", false)
	src := prelude + entry + read("arith.lua", true) + blocks + "end\n" + read("main.lua", false)
	header := []any{0}
	if !strings.Contains(prelude, "local head") { // a marker TTL on every call
		header = []any{0, 0}
	}
	return costScript{"baseline", redis.NewScript(src), header, false}
}
