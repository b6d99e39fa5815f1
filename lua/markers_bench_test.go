package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// markerLayouts are the smallest scripts that decide a batch of 64
// decisions the way the batch script does (one TIME, one MGET, per decision
// its state parsed, formatted and written with SET ... PX) and keep a
// request id's marker in each layout a marker could take: none (the cost of
// a decision without an id), a key of its own (what the scripts do), a key
// of its own checked and written by one SET NX GET, a field of a hash per
// identity and 1.5 s window, and a string per identity and window that
// holds the window's ids. Every marker lives at least 1.5 s, as a 1 s
// deadline's would. KEYS are each decision's state key and then its layout's
// marker keys; ARGV[1] is the layout, then one request id per decision.
const markerLayoutScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local layout = ARGV[1]
local n = #ARGV - 1
local per = #KEYS / n
local read = KEYS
if layout == 'set-nx' or layout == 'hash' then
  read = {}
  for d = 1, n do read[d] = KEYS[(d - 1) * per + 1] end
end
local got = redis.call('MGET', unpack(read))
local written = {}
for d = 1, n do
  local k = (d - 1) * per
  local key, id = KEYS[k + 1], ARGV[d + 1]
  local state = written[key] or got[#read == n and d or k + 1]
  local tokens, ts = 1000, now
  if state then
    local a, b = string.match(state, '^(%d+) (%d+)$')
    if a then tokens, ts = tonumber(a), tonumber(b) end
  end
  local seen = false
  if layout == 'key' then
    seen = got[k + 2]
  elseif layout == 'set-nx' then
    seen = redis.call('SET', KEYS[k + 2], '0', 'NX', 'GET', 'PX', '1500')
  elseif layout == 'hash' then
    seen = redis.call('HGET', KEYS[k + 2], id) or redis.call('HGET', KEYS[k + 3], id)
  elseif layout == 'string' then
    local cur, prev = written[KEYS[k + 2]] or got[k + 2], got[k + 3]
    seen = (cur and string.find(cur, id, 1, true)) or (prev and string.find(prev, id, 1, true))
  end
  if not seen then
    local v = string.format('%d %d', tokens - 1, now)
    redis.call('SET', key, v, 'PX', 2)
    written[key] = v
    if layout == 'key' then
      redis.call('SET', KEYS[k + 2], '0', 'PX', '1500')
    elseif layout == 'hash' then
      redis.call('HSET', KEYS[k + 2], id, '0')
      redis.call('PEXPIRE', KEYS[k + 2], '3000')
    elseif layout == 'string' then
      local m = (written[KEYS[k + 2]] or got[k + 2] or '') .. id
      redis.call('SET', KEYS[k + 2], m, 'PX', '3000')
      written[KEYS[k + 2]] = m
    end
  end
end
return n
`

// BenchmarkMarkerServerCost measures the Redis CPU (INFO cpu, everything
// the server spends, expiry included) per decision of each layout of
// markerLayoutScript: what a request id's marker costs Redis on top of a
// decision, whatever the layout, with the rest of the decision reduced to
// the least the scripts do. "batch" and "batch+id" are the batch script
// itself, the token bucket without and with a request id (a 1.5 s
// ReplayTTL): how far the real decision is from that least. Three
// connections send calls of 64 decisions on 10,000 identities with fresh
// ids for 2 s per layout, as the load tool's 64 callers do, at the load
// tool's limit (1000/s, so that a state expires between uses, as it does
// there). Rounds alternate the layouts, each from an empty keyspace. Each
// layout reports its median µs per decision, and logs its range and its
// median per-round ratio to no marker:
//
//	go test -run '^$' -bench MarkerServerCost -benchtime 8x ./lua/
func BenchmarkMarkerServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	ctx := context.Background()
	script, batch := redis.NewScript(markerLayoutScript), redis.NewScript(lua.Batch.Source())
	for _, s := range []*redis.Script{script, batch} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	limit := algo.ParamsOf(tollgate.Request{Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}, Cost: 1})
	cpu := func() float64 {
		var total float64
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, err := strconv.ParseFloat(srv.Info(b, "cpu", f), 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", f, err)
			}
			total += v
		}
		return total
	}
	layouts := []string{"none", "key", "set-nx", "hash", "string", "batch", "batch+id"}
	var seq atomic.Int64
	run := func(layout string) float64 {
		if err := c.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		var decisions atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(2 * time.Second)
		cpu0 := cpu()
		for g := range 3 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), uint64(seq.Add(1))))
				for time.Now().Before(deadline) {
					window := time.Now().UnixMilli() / 1500
					keys := make([]string, 0, 3*64)
					args := make([]any, 1, 65)
					args[0] = layout
					var ds []batchDecision
					for range 64 {
						tag := "{m-" + strconv.Itoa(r.IntN(10_000)) + "}"
						id := fmt.Sprintf("%022d", seq.Add(1))
						keys = append(keys, tag+":tb")
						switch layout {
						case "key", "set-nx", "batch+id":
							keys = append(keys, tag+":tb:r:"+id)
						case "hash", "string":
							keys = append(keys, tag+":r:"+strconv.FormatInt(window, 36), tag+":r:"+strconv.FormatInt(window-1, 36))
						}
						args = append(args, id)
						replays := []int64{0}
						if layout == "batch+id" {
							replays = []int64{1, 1500}
						}
						ds = append(ds, batchDecision{argv: append(replays, int64(tollgate.TokenBucket), limit.Rate, limit.Period, limit.Capacity, limit.Cost)})
					}
					var err error
					if layout == "batch" || layout == "batch+id" {
						argv, _ := batchArgs(ds, false)
						err = batch.EvalSha(ctx, c, withLineage(keys...), argv...).Err()
					} else {
						err = script.EvalSha(ctx, c, keys, args...).Err()
					}
					if err != nil {
						b.Error(err)
						return
					}
					decisions.Add(64)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return (cpu() - cpu0) * 1e6 / float64(decisions.Load())
	}
	perDecision := make([][]float64, len(layouts))
	ratios := make([][]float64, len(layouts))
	round := 0
	for b.Loop() {
		got := make([]float64, len(layouts))
		for i := range layouts {
			v := i
			if round%2 == 1 {
				v = len(layouts) - 1 - i
			}
			got[v] = run(layouts[v])
			perDecision[v] = append(perDecision[v], got[v])
		}
		for v := range layouts {
			ratios[v] = append(ratios[v], got[v]/got[0])
		}
		round++
	}
	for v, name := range layouts {
		p, plo, phi := spread(perDecision[v])
		r, rlo, rhi := spread(ratios[v])
		b.ReportMetric(p, name+"-µs/decision")
		b.Logf("%-7s %5.2f µs per decision (%.2f–%.2f), %.2f× no marker (%.2f–%.2f) over %d rounds",
			name, p, plo, phi, r, rlo, rhi, len(ratios[v]))
	}
}
