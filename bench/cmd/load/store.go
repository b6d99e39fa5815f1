package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// decisionTimeout bounds each decision, as package interceptor bounds its
// store calls.
const decisionTimeout = 100 * time.Millisecond

// storeLimit is the limit of every store cell: 1000 per second per
// identity. Spread over 10k random identities every call is admitted (the
// write path is measured); one hot identity is far over it (the denial
// path, and tollgate's deny cache).
func storeLimit(alg tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: 1000, Period: time.Second, Burst: 1000}
}

type measurer struct {
	cfg   config
	opts  *redis.Options
	admin *redis.Client
	// nodes, when set, are the servers a cell's Redis figures are summed
	// over (a Cluster's primaries); otherwise admin's alone.
	nodes []*redis.Client
}

// servers is what a cell's Redis figures are read from.
func (m *measurer) servers() []*redis.Client {
	if m.nodes != nil {
		return m.nodes
	}
	return []*redis.Client{m.admin}
}

// serverCPU is the CPU time of every server measured, summed.
func (m *measurer) serverCPU(ctx context.Context) (time.Duration, error) {
	var sum time.Duration
	for _, c := range m.servers() {
		d, err := bench.ServerCPU(ctx, c)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// subject is one limiter under test, built afresh (own client, own key
// prefix) for every cell.
type subject struct {
	name      string
	reference bool // redis_rate: the ratios' denominator
	// anchor, when set, names the subject this one's ratio is taken to
	// instead of the reference: an anchor measured in its conditions.
	anchor    string
	requestID bool
	// make returns the decider and a function releasing its client.
	make func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error)
}

func prefix() string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return "load:" + hex.EncodeToString(b[:]) + ":"
}

func redisRateSubject() subject {
	return subject{name: "redis_rate", reference: true, make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		return prefixed{bench.RedisRate{Limiter: redis_rate.NewLimiter(c), Limit: bench.RedisRateLimit(limit(tollgate.GCRA))}, prefix()}, func() { _ = c.Close() }, nil
	}}
}

// tollgateSubject is tollgate's Redis store as shipped, with the deny cache.
func tollgateSubject(name string, alg tollgate.Algorithm, requestID bool, opts ...store.RedisOption) subject {
	return replayTTLSubject(name, alg, requestID, 0, opts...)
}

// deadlineReplayTTL is the Request.ReplayTTL the interceptor gives a
// request id of a call with a 1 s deadline: its time left plus its margin.
const deadlineReplayTTL = 1500 * time.Millisecond

// redisStore is store.NewRedis on c, c closed when the store cannot be made.
func redisStore(c redis.UniversalClient, opts ...store.RedisOption) (*store.Redis, error) {
	st, err := store.NewRedis(c, opts...)
	if err != nil {
		_ = c.Close()
	}
	return st, err
}

// replayTTLSubject is tollgateSubject whose request ids have replayTTL.
func replayTTLSubject(name string, alg tollgate.Algorithm, requestID bool, replayTTL time.Duration, opts ...store.RedisOption) subject {
	return subject{name: name, requestID: requestID, make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix()), store.WithDenyCache(4096)}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		return bench.Tollgate{Store: st, Limit: limit(alg), ReplayTTL: replayTTL}, func() { _ = c.Close() }, nil
	}}
}

// autoPipelineSubject is tollgate's store on go-redis's AutoPipeliner (the
// blocking face) instead of its own batcher.
func autoPipelineSubject(alg tollgate.Algorithm) subject {
	return subject{name: "tollgate " + alg.String() + " on go-redis AutoPipeline", make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		ap, err := c.AutoPipeline()
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		st, err := store.NewRedis(ap, store.WithPrefix(prefix()), store.WithBatching(0, 0), store.WithDenyCache(4096))
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return bench.Tollgate{Store: st, Limit: limit(alg)}, func() { _ = c.Close() }, nil
	}}
}

// prefixed gives a decider's identities a prefix of their own, so cells
// never share state.
type prefixed struct {
	bench.Decider
	prefix string
}

func (p prefixed) Decide(ctx context.Context, identity, requestID string) (bool, error) {
	return p.Decider.Decide(ctx, p.prefix+identity, requestID)
}

func (m *measurer) storeSubjects() []subject {
	subjects := []subject{redisRateSubject()}
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		subjects = append(subjects,
			tollgateSubject("tollgate "+alg.String(), alg, false),
			tollgateSubject("tollgate "+alg.String()+" +request id", alg, true))
	}
	if m.cfg.variants {
		subjects = append(subjects,
			tollgateSubject("tollgate gcra unbatched", tollgate.GCRA, false, store.WithBatching(0, 0)),
			tollgateSubject("tollgate gcra one round trip at a time", tollgate.GCRA, false, store.WithBatching(128, 1)),
			tollgateSubject("tollgate gcra no deny cache", tollgate.GCRA, false, store.WithDenyCache(0)),
			autoPipelineSubject(tollgate.GCRA))
		for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
			subjects = append(subjects,
				replayTTLSubject("tollgate "+alg.String()+" +request id, ReplayTTL of a 1s deadline", alg, true, deadlineReplayTTL),
				tollgateSubject("tollgate "+alg.String()+" pipelined decide calls", alg, false, store.WithBatchScript(false)),
				tollgateSubject("tollgate "+alg.String()+" pipelined decide calls +request id", alg, true, store.WithBatchScript(false)))
		}
	}
	return m.filter(subjects)
}

func (m *measurer) filter(subjects []subject) []subject {
	if m.cfg.subjects == "" {
		return subjects
	}
	anchors := map[string]bool{}
	for _, s := range subjects {
		if strings.Contains(s.name, m.cfg.subjects) {
			anchors[s.anchor] = true
		}
	}
	var kept []subject
	for _, s := range subjects {
		if s.reference || anchors[s.name] || strings.Contains(s.name, m.cfg.subjects) {
			kept = append(kept, s)
		}
	}
	return kept
}

// sample is one cell's figures.
type sample struct {
	ops, errors  int64
	perSec       float64
	hist         bench.Histogram
	usPerScript  float64
	scriptsPerOp float64
	// redisCPU and clientCPU are the CPU microseconds per operation of the
	// Redis server (all threads) and of this process (the callers, the
	// limiter, gRPC when measured).
	redisCPU, clientCPU float64
	// server is what each server measured spent per operation, with
	// -serverstats.
	server serverStats
}

// run calls op from callers goroutines as fast as they can for m.cfg.d and
// measures it: latency, throughput, and what Redis and this process spent,
// read around the run alone (CONFIG RESETSTAT first).
func (m *measurer) run(ctx context.Context, callers int, op func(r *rand.Rand) error) (*sample, error) {
	for _, c := range m.servers() {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			return nil, err
		}
	}
	redisBefore, err := m.serverCPU(ctx)
	if err != nil {
		return nil, err
	}
	var statsBefore serverStats
	if m.cfg.serverNotes != nil {
		if statsBefore, err = readServerStats(ctx, m.servers()); err != nil {
			return nil, err
		}
	}
	clientBefore := bench.ProcessCPU()
	hists := make([]bench.Histogram, callers)
	var ops, failures atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(m.cfg.d)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &hists[g]
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			var n int64
			for {
				t0 := time.Now()
				if t0.After(stop) {
					break
				}
				if err := op(r); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				h.Record(time.Since(t0))
				n++
			}
			ops.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	clientCPU := bench.ProcessCPU() - clientBefore
	redisAfter, err := m.serverCPU(ctx)
	if err != nil {
		return nil, err
	}
	s := &sample{ops: ops.Load(), errors: failures.Load()}
	for i := range hists {
		s.hist.Merge(&hists[i])
	}
	if s.errors > 0 {
		fmt.Fprintf(os.Stderr, "load: %d of %d operations failed, first: %v\n", s.errors, s.errors+s.ops, firstErr.Load())
	}
	s.perSec = float64(s.ops) / elapsed.Seconds()
	var scripts bench.CommandStat
	for _, c := range m.servers() {
		stats, err := bench.CommandStats(ctx, c)
		if err != nil {
			return nil, err
		}
		sc := bench.ScriptCalls(stats)
		scripts.Calls, scripts.Usec = scripts.Calls+sc.Calls, scripts.Usec+sc.Usec
	}
	if scripts.Calls > 0 {
		s.usPerScript = float64(scripts.Usec) / float64(scripts.Calls)
	}
	if s.ops > 0 && statsBefore != nil {
		after, err := readServerStats(ctx, m.servers())
		if err != nil {
			return nil, err
		}
		s.server = after.perOp(statsBefore, s.ops)
	}
	if s.ops > 0 {
		s.scriptsPerOp = float64(scripts.Calls) / float64(s.ops)
		s.redisCPU = float64((redisAfter - redisBefore).Microseconds()) / float64(s.ops)
		s.clientCPU = float64(clientCPU.Microseconds()) / float64(s.ops)
	}
	return s, nil
}

// cell decides for random identities among ids from callers goroutines,
// each decision under decisionTimeout, with a fresh request id each when
// requestID is set.
func (m *measurer) cell(ctx context.Context, d bench.Decider, callers int, ids []string, requestID bool) (*sample, error) {
	idPrefix := prefix()
	var seq atomic.Int64
	return m.run(ctx, callers, func(r *rand.Rand) error {
		var reqID string
		if requestID {
			reqID = idPrefix + strconv.FormatInt(seq.Add(1), 36)
		}
		dctx, cancel := context.WithTimeout(ctx, decisionTimeout)
		defer cancel()
		_, err := d.Decide(dctx, ids[r.IntN(len(ids))], reqID)
		return err
	})
}

// compare runs every subject -reps times on one scenario, alternating the
// order between repetitions, and returns one row per subject with median
// figures and the median of its per-repetition ratio to the reference.
func (m *measurer) compare(ctx context.Context, section, keys string, callers int, subjects []subject,
	run func(s subject) (*sample, error)) ([]row, error) {
	samples := make([][]*sample, len(subjects))
	ratios := make([][]float64, len(subjects))
	cpuRatios := make([][]float64, len(subjects))
	for rep := range m.cfg.reps {
		order := make([]int, len(subjects))
		for i := range order {
			order[i] = i
			if rep%2 == 1 {
				order[i] = len(subjects) - 1 - i
			}
		}
		repSamples := make([]*sample, len(subjects))
		for _, i := range order {
			s, err := run(subjects[i])
			if err != nil {
				return nil, fmt.Errorf("%s %s %d callers, %s: %w", section, keys, callers, subjects[i].name, err)
			}
			repSamples[i] = s
			samples[i] = append(samples[i], s)
			fmt.Fprintf(os.Stderr, "load: %s %s %d callers rep %d, %s: %.0f/s, Redis CPU %.2f µs/op, %.3f scripts/op\n",
				section, keys, callers, rep+1, subjects[i].name, s.perSec, s.redisCPU, s.scriptsPerOp)
		}
		for i, s := range subjects {
			a := anchorOf(subjects, s)
			if a < 0 || a == i {
				continue
			}
			ref, refCPU := repSamples[a].perSec, repSamples[a].redisCPU
			if ref > 0 {
				ratios[i] = append(ratios[i], repSamples[i].perSec/ref)
			}
			if refCPU > 0 && repSamples[i].redisCPU > 0 {
				cpuRatios[i] = append(cpuRatios[i], repSamples[i].redisCPU/refCPU)
			}
		}
	}
	var rows []row
	for i, s := range subjects {
		r := row{section: section, keys: keys, callers: callers, subject: s.name}
		var perSec, p50, p99, us, spo, rcpu, ccpu []float64
		for _, x := range samples[i] {
			perSec = append(perSec, x.perSec)
			p50 = append(p50, float64(x.hist.Quantile(0.5)))
			p99 = append(p99, float64(x.hist.Quantile(0.99)))
			us = append(us, x.usPerScript)
			spo = append(spo, x.scriptsPerOp)
			rcpu = append(rcpu, x.redisCPU)
			ccpu = append(ccpu, x.clientCPU)
		}
		r.perRep, r.cpuPerRep = perSec, rcpu
		r.perSec, r.usPerScript, r.scriptsPerOp = median(perSec), median(us), median(spo)
		r.redisCPU, r.clientCPU = median(rcpu), median(ccpu)
		r.p50, r.p99 = time.Duration(median(p50)), time.Duration(median(p99))
		if a := anchorOf(subjects, s); a >= 0 && a != i && len(ratios[i]) > 0 {
			r.ratio = median(ratios[i])
			if len(ratios[i]) > 1 {
				r.ratioLo, r.ratioHi = slices.Min(ratios[i]), slices.Max(ratios[i])
			}
			r.ratioRef = subjects[a].name
			if len(cpuRatios[i]) > 0 {
				r.cpuRatio = median(cpuRatios[i])
			}
		}
		rows = append(rows, r)
		m.cfg.serverNotes.add(section, keys, callers, s.name, samples[i])
	}
	return rows, nil
}

// anchorOf returns the index of the subject s's ratios are taken to: its
// anchor, or the reference; -1 for none.
func anchorOf(subjects []subject, s subject) int {
	for i, o := range subjects {
		if s.anchor != "" && o.name == s.anchor || s.anchor == "" && o.reference {
			return i
		}
	}
	return -1
}

func (m *measurer) storeSection(ctx context.Context) ([]row, error) {
	random := make([]string, m.cfg.identities)
	for i := range random {
		random[i] = "user-" + strconv.Itoa(i)
	}
	hot := []string{"hot-user"}
	subjects := m.storeSubjects()
	var rows []row
	for _, keys := range []struct {
		name string
		ids  []string
	}{{"random", random}, {"hot", hot}} {
		for _, callers := range m.cfg.callers {
			r, err := m.compare(ctx, "store", keys.name, callers, subjects, func(s subject) (*sample, error) {
				d, release, err := s.make(m, storeLimit)
				if err != nil {
					return nil, err
				}
				defer release()
				return m.cell(ctx, d, callers, keys.ids, s.requestID)
			})
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
			fmt.Fprintf(os.Stderr, "load: store %s %d callers done\n", keys.name, callers)
		}
	}
	return rows, nil
}
