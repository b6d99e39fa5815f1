package lua_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// batchSizes are the decisions per call BenchmarkBatchServerCost measures:
// 1 is a pipeline of decide calls, the others batch script calls.
var batchSizes = []int{1, 4, 16, 64}

// BenchmarkBatchServerCost measures what Redis spends per decision (µs,
// from INFO commandstats: cmdstat_evalsha's usec over the decisions) when
// 512 decisions go as a pipeline of one decide call each and when they go
// as batch script calls of 4, 16 and 64 decisions, alternating in one run
// on a private server, with and without a request id (a new id each time,
// so every admission writes its marker), and with one limit for every
// decision (limits=1, as concurrent decisions of one rule are: one profile
// per call) or a limit of its own for each (limits=each: as many profiles
// as decisions, the batch layout's worst case). The limits are about 1000
// per second over 1000 identities, so nearly every decision is admitted
// and writes, like the load tool's random cells. Each size reports its
// median over the rounds (use -benchtime=3x or more) and logs it with the
// rounds' range:
//
//	go test -run '^$' -bench BatchServerCost -benchtime 5x ./lua/
//
// With TOLLGATE_BASELINE_LUA naming a directory holding another version's
// *.lua files (assembled as baselineBatchScript says), it measures that
// version's batch script too, in the same
// rounds, right before or after the current one (alternating), and reports
// it as base-µs, with the ratio current ÷ baseline of each round: the two
// ran back to back, so the ratio is less at the mercy of the machine's
// other work than either figure. A baseline whose batch.lua does not read
// profiles ("local nprofiles") is sent the older layout, each decision's
// decide call arguments one after the other. The current script gets the
// layout the store would send (profiles, or inline when fewer than two
// decisions share each profile: limits=each), or the one
// TOLLGATE_BATCH_LAYOUT names, "profiles" or "inline", for every call. For
// example, against the version of commit bd7d069:
//
//	mkdir -p /tmp/lua-base && for f in $(git ls-tree --name-only bd7d069 lua/ | grep '[.]lua$'); do
//	  git show bd7d069:$f > /tmp/lua-base/${f#lua/}; done
//	TOLLGATE_BASELINE_LUA=/tmp/lua-base go test -run '^$' -bench BatchServerCost -benchtime 5x ./lua/
func BenchmarkBatchServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	ctx := context.Background()
	decide := redis.NewScript(lua.Decide.Source())
	scripts := []batchScript{{name: "", script: redis.NewScript(lua.Batch.Source()), profiles: true, lineage: true}}
	if dir := os.Getenv("TOLLGATE_BASELINE_LUA"); dir != "" {
		scripts = append(scripts, baselineBatchScript(b, dir))
	}
	if os.Getenv("TOLLGATE_UNSTAMPED") != "" {
		scripts = append(scripts, batchScript{name: "unstamped-", script: scripts[0].script, profiles: true, unstamped: true, lineage: true})
	}
	if err := decide.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	for _, s := range scripts {
		if err := s.script.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		for _, withID := range []bool{false, true} {
			for _, each := range []bool{false, true} {
				limits := map[bool]string{false: "1", true: "each"}[each]
				b.Run(fmt.Sprintf("%s/request-id=%v/limits=%s", alg, withID, limits), func(b *testing.B) {
					// perDecision[s][i]: script s's µs per decision at
					// batchSizes[i], one figure per round.
					perDecision := make([][][]float64, len(scripts))
					for s := range scripts {
						perDecision[s] = make([][]float64, len(batchSizes))
					}
					seq, round := 0, 0
					for b.Loop() {
						for range 10 {
							round++
							for i, size := range batchSizes {
								for j := range scripts {
									s := (j + round) % len(scripts) // alternate which goes first
									if size == 1 && s > 0 {
										continue // decide calls: the same whatever the batch script
									}
									_, usec0 := evalshaStats(b, srv)
									pipe := c.Pipeline()
									for range 512 / size {
										var keys []string
										var ds []batchDecision
										for d := range size {
											seq++
											key := "{bench-" + scripts[s].name + strconv.Itoa(seq%1000) + "}:" + alg.String() // each script its own states
											keys = append(keys, key)
											argv := []int64{0}
											if withID {
												keys = append(keys, key+":r:"+strconv.Itoa(seq))
												argv = []int64{4, 60_000}
											}
											limit := tollgate.Limit{Algorithm: alg, Rate: 1000, Period: 1e9, Burst: 1000}
											if each {
												limit.Rate += int64(d)
											}
											p := algo.ParamsOf(tollgate.Request{Limit: limit, Cost: 1})
											ds = append(ds, batchDecision{argv: append(argv, int64(alg), p.Rate, p.Period, p.Capacity, p.Cost)})
										}
										// One lineage key for every call, as on a
										// single node.
										lineage := "{bench-" + scripts[s].name + "}:lineage"
										if size == 1 {
											decide.EvalSha(ctx, pipe, append(keys, lineage), append([]any{testEra}, anys(ds[0].argv)...)...)
										} else {
											if scripts[s].lineage {
												keys = append(keys, lineage)
											}
											scripts[s].script.EvalSha(ctx, pipe, keys, scripts[s].args(ds)...)
										}
									}
									if _, err := pipe.Exec(ctx); err != nil {
										b.Fatal(err)
									}
									_, usec1 := evalshaStats(b, srv)
									perDecision[s][i] = append(perDecision[s][i], float64(usec1-usec0)/512)
								}
							}
						}
					}
					for i, size := range batchSizes {
						line := fmt.Sprintf("%d per call:", size)
						for s, script := range scripts {
							if size == 1 && s > 0 {
								continue
							}
							m, lo, hi := spread(perDecision[s][i])
							b.ReportMetric(m, fmt.Sprintf("%sµs/decision-%d-per-call", script.name, size))
							line += fmt.Sprintf(" %sµs median %.2f (%.2f–%.2f);", script.name, m, lo, hi)
							if s == 0 {
								continue
							}
							var ratios []float64
							lower := 0
							for r, x := range perDecision[s][i] {
								ratios = append(ratios, perDecision[0][i][r]/x)
								if ratios[r] < 1 {
									lower++
								}
							}
							m, lo, hi = spread(ratios)
							line += fmt.Sprintf(" current÷%s per round median %.3f (%.3f–%.3f), below 1 in %d of %d;",
								strings.TrimSuffix(script.name, "-"), m, lo, hi, lower, len(ratios))
						}
						b.Log(line)
					}
				})
			}
		}
	}
	// Where a script's time goes: the commands it calls, as Redis counts
	// them (all sizes and scripts together).
	for _, cmd := range []string{"evalsha", "time", "mget", "set", "incr"} {
		b.Logf("cmdstat_%s: %s", cmd, srv.Info(b, "commandstats", "cmdstat_"+cmd))
	}
}

// batchScript is a batch script to measure: its name in the metrics ("" for
// the current one), and whether it takes profiles (the current layout:
// then inline when the store would send the decisions inline, unless
// TOLLGATE_BATCH_LAYOUT says "profiles" or "inline") or only each
// decision's decide call arguments one after the other.
type batchScript struct {
	name     string
	script   *redis.Script
	profiles bool
	// unstamped sends the current script with no era: its calls write no
	// lineage, as a store without a journal sends them.
	unstamped bool
	// stamped: a baseline that takes an era, as the current script does.
	stamped bool
	// lineage: the script takes its slot's lineage key as its last KEYS.
	lineage bool
}

// args lays out ds as s's ARGV.
func (s batchScript) args(ds []batchDecision) []any {
	if s.profiles {
		inline := inlineAsTheStore(ds)
		switch os.Getenv("TOLLGATE_BATCH_LAYOUT") {
		case "profiles":
			inline = false
		case "inline":
			inline = true
		}
		argv, _ := batchArgs(ds, inline)
		switch {
		case s.unstamped:
			argv[0] = ""
		case s.name != "" && !s.stamped:
			argv = argv[1:] // a baseline's batch script that takes no era
		}
		return argv
	}
	var argv []any
	for _, d := range ds {
		argv = append(argv, anys(d.argv)...)
	}
	return argv
}

func anys(v []int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

// baselineBatchScript assembles the batch script in dir as its version's
// lua.go did: without batch_end.lua, as lua.go does now (lua.SourceIn);
// with it, batch.lua, arith.lua, the four <algorithm>.lua blocks chosen by
// the decision's algorithm and batch_end.lua.
func baselineBatchScript(b *testing.B, dir string) batchScript {
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return string(data)
	}
	head := read("batch.lua")
	if _, err := os.Stat(filepath.Join(dir, "batch_end.lua")); os.IsNotExist(err) {
		src, err := lua.SourceIn(dir, lua.Batch)
		if err != nil {
			b.Fatal(err)
		}
		// A version that reads an era takes one, as the current script does.
		return batchScript{name: "base-", script: redis.NewScript(src), profiles: true, stamped: strings.Contains(head, "local era = ARGV[1]"), lineage: strings.Contains(head, "lineage key")}
	}
	blocks := ""
	for i, a := range algorithms {
		if i > 0 {
			blocks += "else"
		}
		blocks += fmt.Sprintf("if alg == %d then\n%s", i, read(a.String()+".lua"))
	}
	src := head + read("arith.lua") + blocks + "end\n" + read("batch_end.lua")
	return batchScript{name: "base-", script: redis.NewScript(src), profiles: strings.Contains(head, "local nprofiles")}
}
