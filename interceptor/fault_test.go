package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
)

// observedStore passes every decision to a real store and remembers when
// each ended and with what error, so that a test can tell what reached
// Redis while the breaker was open and when decisions resumed.
type observedStore struct {
	tollgate.Store
	mu    sync.Mutex
	calls []storeCall
}

type storeCall struct {
	end time.Time
	err error
}

func (s *observedStore) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	d, err := s.Store.Allow(ctx, req)
	s.mu.Lock()
	s.calls = append(s.calls, storeCall{time.Now(), err})
	s.mu.Unlock()
	return d, err
}

// between returns how many store calls ended in [from, to) and how many of
// those failed.
func (s *observedStore) between(from, to time.Time) (calls, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if !c.end.Before(from) && c.end.Before(to) {
			calls++
			if c.err != nil {
				failed++
			}
		}
	}
	return calls, failed
}

// slowOnly reports whether store calls failed in [from, to) and every
// one of those failures was its deadline passing: a machine too busy to
// answer within the store deadline, not a stale connection or a lost
// script.
func (s *observedStore) slowOnly(from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed := 0
	for _, c := range s.calls {
		if c.err == nil || c.end.Before(from) || !c.end.Before(to) {
			continue
		}
		var ne net.Error
		if !errors.Is(c.err, context.DeadlineExceeded) && !(errors.As(c.err, &ne) && ne.Timeout()) {
			return false
		}
		failed++
	}
	return failed > 0
}

// errorsContaining counts the store errors whose text contains s.
func (s *observedStore) errorsContaining(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.err != nil && strings.Contains(c.err.Error(), sub) {
			n++
		}
	}
	return n
}

// rpcRecord is one call as the client saw it.
type rpcRecord struct {
	start, end time.Time
	code       codes.Code
	msg        string
	// byStore reports that the shared store decided the call: its trailer
	// carries the store limit's capacity, not the local cap's, and a
	// fail-open admission carries no trailer at all.
	byStore bool
}

// Capacities of the fault test's limits, told apart by x-ratelimit-limit.
const (
	faultStoreCap = 1_000_000
	faultLocalCap = 999_999
)

// faultTarget is one limiter, with one fail mode, behind its own gRPC server
// and its own Redis client, like one replica of a service.
type faultTarget struct {
	mode  interceptor.FailMode
	store *observedStore
	mu    sync.Mutex
	rpcs  []rpcRecord
}

func (ft *faultTarget) record(r rpcRecord) {
	ft.mu.Lock()
	ft.rpcs = append(ft.rpcs, r)
	ft.mu.Unlock()
}

// in returns the calls that started in [from, to).
func (ft *faultTarget) in(from, to time.Time) []rpcRecord {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	var out []rpcRecord
	for _, r := range ft.rpcs {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// resumedAt returns when the first call that started at or after from was
// decided by the store again.
func (ft *faultTarget) resumedAt(from time.Time) (time.Time, bool) {
	var first time.Time
	for _, r := range ft.in(from, time.Now().Add(time.Hour)) {
		if r.byStore && (first.IsZero() || r.end.Before(first)) {
			first = r.end
		}
	}
	return first, !first.IsZero()
}

// Timings of TestFaultsUnderLoad. The store deadline is short so that the
// outages cost little; the breaker opens after 3 failures and probes every
// 100ms, well inside the one second decisions have to resume in.
const (
	faultStoreTimeout = 200 * time.Millisecond
	faultBreakerTrips = 3
	faultCoolDown     = 100 * time.Millisecond
	faultDown         = 800 * time.Millisecond  // how long the server is stopped
	faultPause        = 1000 * time.Millisecond // how long it is blackholed
	faultSettle       = 1200 * time.Millisecond // healthy time after each outage
	faultResume       = time.Second             // decisions must resume within this
	faultCallers      = 3                       // goroutines calling each limiter
)

// TestFaultsUnderLoad runs three limiters, one per fail mode, each with its
// own Redis client on one private redis-server, under continuous load while
// the server is killed (SIGKILL), restarted with an empty script cache, and
// then blackholed (CLIENT PAUSE ALL) until the pause runs out. It checks
// that every call is answered within the store deadline plus a margin, with
// what its fail mode promises; that the breaker keeps most calls away from a
// dead store and closes again; that decisions resume within a second of
// Redis answering; that the NOSCRIPT answers of the restarted server never
// reach a caller; and that no goroutine is left behind.
//
// go test -v -run FaultsUnderLoad ./interceptor prints the figures.
func TestFaultsUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	// Goroutines alive now (the test framework's, the server's) are not the
	// test's to end; a restarted server's process watcher lives as long as
	// the server does.
	leaks := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/tollgate/tollgate/internal/redistest.spawn.func1")}
	t.Run("load", func(t *testing.T) { faultsUnderLoad(t, srv) })
	goleak.VerifyNone(t, leaks...)
}

func faultsUnderLoad(t *testing.T, srv *redistest.Server) {
	redistest.LetDialProbesEnd(t) // the clients of the stopped server may have started some
	local := tollgate.PerHour(faultLocalCap)
	var targets []*faultTarget
	var clients []func(ctx context.Context) rpcRecord
	for _, mode := range []interceptor.FailMode{interceptor.FailOpen, interceptor.FailClosed, engine.FailLocalAt(local)} {
		st := &observedStore{Store: newRedis(t, redisClient(t, srv.Addr()))}
		// Load the script and open a connection before the clock matters.
		if _, err := st.Allow(context.Background(), tollgate.Request{Key: "warm-up", Limit: tollgate.PerHour(1)}); err != nil {
			t.Fatal(err)
		}
		r := perTenant()
		r.Limits, r.FailMode = interceptor.Fixed(tollgate.PerHour(faultStoreCap)), mode
		c := serve(t, newLimiter(t, st, interceptor.WithRules(r), interceptor.WithAdmittedTrailers(), func(c *engine.Config) { c.LocalStore = newMemory(t) },
			interceptor.WithStoreTimeout(faultStoreTimeout),
			func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = faultBreakerTrips, faultCoolDown }))
		ft := &faultTarget{mode: mode, store: st}
		targets = append(targets, ft)
		clients = append(clients, func(ctx context.Context) rpcRecord {
			start := time.Now()
			trailer, _, err := say(ctx, c, "hi")
			rec := rpcRecord{start: start, end: time.Now(), code: status.Code(err)}
			if err != nil {
				rec.msg = status.Convert(err).Message()
			}
			lim := trailer.Get(fields.LegacyLimit)
			rec.byStore = err == nil && len(lim) == 1 && lim[0] == fmt.Sprint(faultStoreCap)
			ft.record(rec)
			return rec
		})
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, call := range clients {
		for g := range faultCallers {
			wg.Go(func() {
				ctx := tenant(context.Background(), fmt.Sprintf("tenant-%d-%d", i, g))
				for {
					select {
					case <-stop:
						return
					default:
					}
					call(ctx)
					// Leave the machine some air: the load is about
					// continuity, not throughput.
					time.Sleep(time.Millisecond)
				}
			})
		}
	}

	start := time.Now()
	// Every limiter decides calls on the store before the first outage.
	if !redistest.Await(10*time.Second, func() bool {
		for _, ft := range targets {
			n := 0
			for _, r := range ft.in(start, time.Now()) {
				if r.byStore {
					n++
				}
			}
			if n < 20 {
				return false
			}
		}
		return true
	}) {
		close(stop)
		wg.Wait()
		t.Fatal("a limiter decided fewer than 20 calls on the store within 10s of the load's start")
	}
	stoppedAt := time.Now()
	srv.Stop(t)
	redistest.Elapse(faultDown) // the outage
	srv.Restart(t)              // returns once the new process answers PING
	back1 := time.Now()
	redistest.Elapse(faultSettle) // healthy, until the next outage
	pausedAt := time.Now()
	srv.Pause(t, faultPause)
	back2 := srv.AwaitAnswer(t, faultPause+5*time.Second)
	redistest.Elapse(faultSettle) // healthy, until the load ends
	close(stop)
	wg.Wait()
	end := time.Now()

	noscript := srv.ErrorCount(t, "NOSCRIPT") // since the restart: a fresh process
	t.Logf("fail mode | outage | calls | max latency | outcomes | store calls (failed) | decided by Redis again after")
	for _, ft := range targets {
		var all []rpcRecord
		all = append(all, ft.in(start, end)...)
		var slowest time.Duration
		for _, r := range all {
			slowest = max(slowest, r.end.Sub(r.start))
			if r.end.Sub(r.start) > faultStoreTimeout+answerMargin {
				t.Errorf("fail %s: a call took %s, more than the store deadline %s + %s", ft.mode, r.end.Sub(r.start), faultStoreTimeout, answerMargin)
			}
			switch {
			case r.code == codes.OK:
			case r.code == codes.Unavailable && ft.mode == interceptor.FailClosed && strings.Contains(r.msg, "rate limiter unavailable"):
			default:
				t.Errorf("fail %s: a call ended %s %q, which this fail mode never answers", ft.mode, r.code, r.msg)
			}
		}
		for _, o := range []struct {
			name            string
			from, back, end time.Time
		}{
			{"killed", stoppedAt, back1, pausedAt},
			{"paused", pausedAt, back2, end},
		} {
			outage := ft.in(o.from, o.back)
			outcomes := map[string]int{}
			var slow time.Duration
			for _, r := range outage {
				slow = max(slow, r.end.Sub(r.start))
				switch {
				case r.byStore:
					outcomes["store"]++
				case r.code == codes.OK && ft.mode == interceptor.FailOpen:
					outcomes["open"]++
				case r.code == codes.OK:
					outcomes["local"]++
				default:
					outcomes[r.code.String()]++
				}
			}
			calls, failed := ft.store.between(o.from, o.back)
			resumed, ok := ft.resumedAt(o.back)
			if !ok {
				t.Errorf("fail %s: after Redis was %s, no call was decided by the store again", ft.mode, o.name)
				continue
			}
			t.Logf("%-5s | %s %s | %d | %s | %v | %d (%d) | %s",
				ft.mode, o.name, o.back.Sub(o.from).Round(time.Millisecond), len(outage), slow.Round(time.Millisecond),
				outcomes, calls, failed, resumed.Sub(o.back).Round(time.Millisecond))
			if len(outage) == 0 {
				t.Errorf("fail %s: no call during the %s outage: the test proves nothing", ft.mode, o.name)
			}
			// The breaker: without it every call of the outage would have
			// waited on the store.
			if failed >= len(outage) {
				t.Errorf("fail %s: %d of %d calls during the %s outage waited on the store: the breaker did not open", ft.mode, failed, len(outage), o.name)
			}
			if d := resumed.Sub(o.back); d > faultResume {
				t.Errorf("fail %s: decisions resumed %s after Redis answered again (%s), want within %s", ft.mode, d, o.name, faultResume)
			}
			// Once the store decides again, it decides every call until the
			// next outage: the breaker closed and no stale connection
			// surfaced an error. A machine too busy to answer within the
			// store deadline (every failure then a deadline passing) is
			// the fail mode working, not a stale connection: logged.
			for _, r := range ft.in(resumed, o.end) {
				if !r.byStore && r.end.Before(o.end) {
					if ft.store.slowOnly(resumed, o.end) {
						t.Logf("fail %s: after decisions resumed (%s) a call was answered by the fail mode: every store failure then was its deadline passing (a busy machine)", ft.mode, o.name)
						break
					}
					t.Errorf("fail %s: a call after decisions resumed (%s) was not decided by the store: %s %q", ft.mode, o.name, r.code, r.msg)
					break
				}
			}
		}
		if n := ft.store.errorsContaining("NOSCRIPT"); n != 0 {
			t.Errorf("fail %s: %d NOSCRIPT errors reached the limiter", ft.mode, n)
		}
		t.Logf("%-5s | all | %d calls | slowest %s", ft.mode, len(all), slowest.Round(time.Millisecond))
	}
	t.Logf("restarted server answered NOSCRIPT %d times (the store loads its scripts as it connects); NOSCRIPT errors surfaced: 0", noscript)
	if noscript > 1 {
		t.Errorf("the restarted server answered NOSCRIPT %d times: the scripts are loaded as the client connects, want at most 1", noscript)
	}
}
