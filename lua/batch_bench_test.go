package lua_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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
// so every admission writes its marker). The limit is 1000 per second over
// 1000 identities, so nearly every decision is admitted and writes, like
// the load tool's random cells. Each size reports its median over the
// rounds (use -benchtime=3x or more):
//
//	go test -run '^$' -bench BatchServerCost -benchtime 5x ./lua/
func BenchmarkBatchServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	ctx := context.Background()
	decide, batch := redis.NewScript(lua.Source(lua.Decide)), redis.NewScript(lua.Source(lua.Batch))
	for _, s := range []*redis.Script{decide, batch} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		for _, withID := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/request-id=%v", alg, withID), func(b *testing.B) {
				p := algo.ParamsOf(tollgate.Request{Limit: tollgate.Limit{Algorithm: alg, Rate: 1000, Period: 1e9, Burst: 1000}, Cost: 1})
				perDecision := make([][]float64, len(batchSizes))
				seq := 0
				for b.Loop() {
					for range 10 {
						for i, size := range batchSizes {
							_, usec0 := evalshaStats(b, srv)
							pipe := c.Pipeline()
							for range 512 / size {
								var keys []string
								var ds []batchDecision
								for range size {
									seq++
									key := "{bench-" + strconv.Itoa(seq%1000) + "}:" + alg.String()
									keys = append(keys, key)
									argv := []int64{0}
									if withID {
										keys = append(keys, key+":r:"+strconv.Itoa(seq))
										argv = []int64{4, 60_000}
									}
									ds = append(ds, batchDecision{argv: append(argv, int64(alg), p.Rate, p.Period, p.Capacity, p.Cost)})
								}
								if size == 1 {
									var argv []any
									for _, a := range ds[0].argv {
										argv = append(argv, a)
									}
									decide.EvalSha(ctx, pipe, keys, argv...)
								} else {
									argv, _ := batchArgs(ds)
									batch.EvalSha(ctx, pipe, keys, argv...)
								}
							}
							if _, err := pipe.Exec(ctx); err != nil {
								b.Fatal(err)
							}
							_, usec1 := evalshaStats(b, srv)
							perDecision[i] = append(perDecision[i], float64(usec1-usec0)/512)
						}
					}
				}
				for i, size := range batchSizes {
					slices.Sort(perDecision[i])
					b.ReportMetric(perDecision[i][len(perDecision[i])/2], fmt.Sprintf("µs/decision-%d-per-call", size))
				}
			})
		}
	}
	// Where a script's time goes: the commands it calls, as Redis counts
	// them (all sizes together).
	for _, cmd := range []string{"evalsha", "time", "mget", "set", "incr"} {
		b.Logf("cmdstat_%s: %s", cmd, srv.Info(b, "commandstats", "cmdstat_"+cmd))
	}
}
