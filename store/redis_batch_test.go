package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// pipelineCounter is a go-redis hook counting the pipelines a client sends
// and the decisions in them, to show that decisions did share round trips.
type pipelineCounter struct {
	pipelines, commands, largest atomic.Int64
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := int64(0)
		for _, cmd := range cmds {
			n += decisionsIn(cmd)
		}
		p.pipelines.Add(1)
		p.commands.Add(n)
		for {
			l := p.largest.Load()
			if n <= l || p.largest.CompareAndSwap(l, n) {
				break
			}
		}
		return err
	}
}

// decisionsIn is how many decisions cmd, sent, carried: those its batch
// script call answered, else one.
func decisionsIn(cmd redis.Cmder) int64 {
	args := cmd.Args()
	if sc, ok := cmd.(scriptCmd); ok && len(args) > 1 && (args[1] == batchScript.sha || args[1] == batchScript.src) && sc.Err() == nil {
		return int64(len(sc.Val())-1) / 5
	}
	return 1
}

// countPipelines installs a pipelineCounter on c.
func countPipelines(c redis.UniversalClient) *pipelineCounter {
	p := &pipelineCounter{}
	c.AddHook(p)
	return p
}

// checkBatched fails the test unless some pipeline carried several decisions.
func checkBatched(t *testing.T, p *pipelineCounter) {
	t.Helper()
	t.Logf("%d pipelines carried %d decisions, the largest %d", p.pipelines.Load(), p.commands.Load(), p.largest.Load())
	if p.largest.Load() < 2 {
		t.Fatalf("no pipeline carried more than %d decision(s): the load was not batched, the test proves nothing", p.largest.Load())
	}
}

// batchedExactQuota hammers one key per algorithm from 64 goroutines over
// several batched stores and checks that exactly the quota is admitted and
// that the decisions did travel in shared pipelines.
func batchedExactQuota(t *testing.T, clients []redis.UniversalClient) {
	prefix := redistest.KeyPrefix(t)
	var stores []*Redis
	var counters []*pipelineCounter
	for _, c := range clients {
		counters = append(counters, countPipelines(c))
		// No deny cache: every call must reach Redis and be judged there.
		stores = append(stores, newRedis(t, c, WithPrefix(prefix), WithDenyCache(0)))
	}
	exactQuota(t, stores)
	total := &pipelineCounter{}
	for _, p := range counters {
		total.pipelines.Add(p.pipelines.Load())
		total.commands.Add(p.commands.Load())
		total.largest.Store(max(total.largest.Load(), p.largest.Load()))
	}
	checkBatched(t, total)
}

func TestBatchedExactQuota(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		batchedExactQuota(t, clientsLike(t, c, clients))
	})
}

// flushDuringBatchedLoad runs 32 goroutines of decisions through a batched
// store while admin flushes the script cache of every node every 2ms, and
// checks that no error reached a caller although nodes answered NOSCRIPT.
func flushDuringBatchedLoad(t *testing.T, client redis.UniversalClient, nodes []*redistest.Server) {
	p := countPipelines(client)
	st := newRedis(t, client, WithPrefix(redistest.KeyPrefix(t)), WithDenyCache(0))
	ctx := context.Background()
	noscriptBefore := int64(0)
	for _, n := range nodes {
		noscriptBefore += n.ErrorCount(t, "NOSCRIPT")
	}
	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	for _, n := range nodes {
		flushScripts(t, n.Client(t), stop, &wg, &flushes)
	}
	var decisions, failures atomic.Int64
	deadline := time.Now().Add(400 * time.Millisecond)
	var callers sync.WaitGroup
	for g := range 32 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			req := tollgate.Request{Key: "flush-" + strconv.Itoa(g), Limit: tollgate.PerSecond(1_000_000)}
			req.Limit.Algorithm = algorithms[g%len(algorithms)]
			for time.Now().Before(deadline) {
				if _, err := st.Allow(ctx, req); err != nil {
					failures.Add(1)
					t.Errorf("decision during SCRIPT FLUSH: %v", err)
					return
				}
				decisions.Add(1)
			}
		}()
	}
	callers.Wait()
	close(stop)
	wg.Wait()
	noscript := -noscriptBefore
	for _, n := range nodes {
		noscript += n.ErrorCount(t, "NOSCRIPT")
	}
	t.Logf("%d decisions, %d SCRIPT FLUSH, %d NOSCRIPT answered and recovered, %d errors surfaced",
		decisions.Load(), flushes.Load(), noscript, failures.Load())
	if flushes.Load() == 0 || noscript == 0 || decisions.Load() == 0 {
		t.Fatalf("%d flushes, %d NOSCRIPT, %d decisions: the flushes did not meet the load", flushes.Load(), noscript, decisions.Load())
	}
	checkBatched(t, p)
}

func TestBatchedScriptFlushDuringLoad(t *testing.T) {
	// Private servers: their script caches are flushed and errors counted.
	forEachPrivateRedis(t, flushDuringBatchedLoad)
}

// TestBatchedCallersLeaveOnTime freezes Redis while one decision is in
// flight and many more wait to share the next round trip, and checks that
// each waiting caller returns its own context's error as soon as that
// context ends, not when Redis wakes; the decisions then finish normally.
func TestBatchedCallersLeaveOnTime(t *testing.T) {
	srv := redistest.Start(t) // private: it is put to sleep
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second, ContextTimeoutEnabled: false})
	defer c.Close()
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	limit := tollgate.PerSecond(1000)
	if _, err := st.Allow(ctx, tollgate.Request{Key: "warm-up", Limit: limit}); err != nil {
		t.Fatal(err)
	}
	woke := srv.Sleep(t, 600*time.Millisecond)

	// The first caller takes the round trip and hangs with the server; the
	// others queue behind it.
	first := make(chan error, 1)
	go func() {
		_, err := st.Allow(ctx, tollgate.Request{Key: "first", Limit: limit})
		first <- err
	}()
	waitFor(t, func() bool { st.batch.mu.Lock(); defer st.batch.mu.Unlock(); return st.batch.running == 1 })

	const waiting = 16
	type result struct {
		err  error
		late time.Duration
	}
	results := make(chan result, waiting)
	for i := range waiting {
		go func() {
			cctx, cancel := context.WithCancel(ctx)
			var deadline time.Time
			if i%2 == 0 {
				// Half end by deadline, half by cancellation.
				var dcancel context.CancelFunc
				cctx, dcancel = context.WithTimeout(cctx, 50*time.Millisecond)
				defer dcancel()
				deadline = time.Now().Add(50 * time.Millisecond)
			} else {
				deadline = time.Now().Add(50 * time.Millisecond)
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			defer cancel()
			_, err := st.Allow(cctx, tollgate.Request{Key: "waiter-" + strconv.Itoa(i), Limit: limit})
			results <- result{err, time.Since(deadline)}
		}()
	}
	for range waiting {
		r := <-results
		if !errors.Is(r.err, context.DeadlineExceeded) && !errors.Is(r.err, context.Canceled) {
			t.Errorf("a waiting caller whose context ended got %v, want its context's error", r.err)
		}
		if r.late > 200*time.Millisecond {
			t.Errorf("a waiting caller returned %s after its context ended, want promptly (Redis sleeps 600ms)", r.late)
		}
	}
	if err := <-woke; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the decision in flight during the sleep: %v", err)
	}
	// The queue drained: the store decides again, and no round trip is left.
	if _, err := st.Allow(ctx, tollgate.Request{Key: "after", Limit: limit}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st.batch.mu.Lock()
		defer st.batch.mu.Unlock()
		return st.batch.running == 0 && len(st.batch.queue) == 0
	})
}

// waitFor polls cond every millisecond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAllowAllocations bounds the allocations of one decision on the
// unbatched path: the script's arguments are boxed without allocating.
// The failover journal is off: its goroutine, and those of other tests'
// stores, allocate beside the decisions (TestJournalAddAllocations bounds
// the journal's share of a decision).
func TestAllowAllocations(t *testing.T) {
	c := redistest.Single(t).Client(t)
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithJournal(0))
	ctx := context.Background()
	req := tollgate.Request{Key: "allocs", Limit: tollgate.PerSecond(1_000_000), RequestID: "0123456789abcdef0123456789abcdef"}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := st.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	// The key names, the command, its reply slice and go-redis's own.
	if allocs > 8 {
		t.Errorf("one decision allocates %v times, want at most 8", allocs)
	}
}
