package tollgate_test

// End-of-call work off the response path, and Close draining it.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store"
)

// gate holds handlers until it opens, then has each report cost.
type gate struct {
	arrived atomic.Int64
	open    chan struct{}
	cost    int64
}

func newGate(cost int64) *gate { return &gate{open: make(chan struct{}), cost: cost} }

func (g *gate) before(ctx context.Context, _ string) error {
	g.arrived.Add(1)
	<-g.open
	interceptor.ReportCost(ctx, g.cost)
	return nil
}

// await waits until n handlers are held.
func (g *gate) await(t *testing.T, n int64) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, func() error {
		if got := g.arrived.Load(); got < n {
			return fmt.Errorf("%d of %d calls reached their handler", got, n)
		}
		return nil
	})
}

// settledCalls runs n calls of tenant who through c, each held by g, and
// returns a function that opens g and reports how long each response took
// after that, once every call returned.
func settledCalls(t *testing.T, c *echo.Client, who string, g *gate, n int) func() []time.Duration {
	var wg sync.WaitGroup
	var opened atomic.Int64
	took := make([]time.Duration, n)
	for i := range n {
		wg.Go(func() {
			if _, _, err := say(tenant(who), c); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			took[i] = time.Since(time.Unix(0, opened.Load()))
		})
	}
	g.await(t, int64(n))
	return func() []time.Duration {
		opened.Store(time.Now().UnixNano())
		close(g.open)
		wg.Wait()
		return took
	}
}

// meteredRule reserves 100 per call from 10,000 a day and settles at what
// the handler reported.
func meteredRule(t *testing.T) interceptor.Rule {
	// The window turns at 00:00 UTC: a test that would cross it waits
	// until it has, rather than count across two windows.
	now := time.Now().UTC()
	if left := now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now); left < 30*time.Second {
		redistest.Elapse(left + 100*time.Millisecond)
	}
	r := rule(t, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10_000, Period: 24 * time.Hour})
	r.Cost, r.Settle = 100, interceptor.SettleReported
	return r
}

// counted is what the window of r counted for tenant a: used plus owed.
func counted(t *testing.T, st tollgate.Store, r interceptor.Rule) int64 {
	q := peekOne(t, limiter(t, st, interceptor.WithRules(r)), r.Name, interceptor.Caller{Value: "a"}, 24*time.Hour)
	return 10_000 - q.Available + q.Decision.Debt
}

// 40 calls reserving 100 and reporting 7 end while Redis refuses writes
// (min-replicas-to-write with no replica, on every primary) for 600ms:
// every response returns at once, and after Close the window holds
// exactly 7 × 40. On a single node, through Sentinel, on a 3-primary
// Cluster, and on the Memory store (which never refuses).
func TestCloseDeliversSettlementsOwedWhileRedisRefusedWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (tollgate.Store, []*redis.Client)
	}{
		{"single", func(t *testing.T) (tollgate.Store, []*redis.Client) {
			srv := redistest.Start(t)
			return newRedis(t, srv.Client(t)), []*redis.Client{srv.Client(t)}
		}},
		{"sentinel", func(t *testing.T) (tollgate.Store, []*redis.Client) {
			srv := redistest.Start(t)
			sentinel := redistest.Sentinel(t, srv)
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel.Addr()}})
			t.Cleanup(func() { _ = c.Close() })
			return newRedis(t, c), []*redis.Client{srv.Client(t)}
		}},
		{"cluster", func(t *testing.T) (tollgate.Store, []*redis.Client) {
			cl := redistest.NewClusterTimeout(t, 0, 5*time.Second)
			var admins []*redis.Client
			for _, n := range cl.Nodes {
				admins = append(admins, n.Client(t))
			}
			return newRedis(t, cl.Client(t), store.WithClusterTags(3)), admins
		}},
		{"memory", func(t *testing.T) (tollgate.Store, []*redis.Client) { return newMemory(t), nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, admins := tc.setup(t)
			refuse := func(n string) {
				for _, a := range admins {
					if err := a.ConfigSet(context.Background(), "min-replicas-to-write", n).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			r := meteredRule(t)
			// The default generous store deadline: an admission that timed
			// out on a busy machine would be admitted by FailOpen, and a
			// debit whose reply came late never settled.
			l := limiter(t, st, interceptor.WithRules(r))
			g := newGate(7)
			c := serve(t, l, &echo.Server{Before: g.before}, nil)
			finish := settledCalls(t, c, "a", g, 40)
			refuse("1")
			refused := time.Now()
			for _, d := range finish() {
				if d > 300*time.Millisecond {
					t.Errorf("a response took %s after its handler returned: held by its settlement", d)
				}
			}
			if admins != nil {
				if _, err := st.(tollgate.Settler).Settle(context.Background(), tollgate.Request{Key: "a", Limit: r.Limits.List()[0], RequestID: "p"}, tollgate.Admission{}, 0); err == nil {
					t.Fatal("Redis took a write: the test proves nothing")
				}
			}
			redistest.Elapse(time.Until(refused.Add(600 * time.Millisecond))) // Redis refuses writes for 600ms
			refuse("0")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := l.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := counted(t, st, r); got != 7*40 {
				t.Fatalf("the window counted %d after Close, want 7 × 40 = 280", got)
			}
		})
	}
}

// Redis paused 3s (CLIENT PAUSE) as settled calls end: their responses are
// not held by the settlements, which Close delivers once Redis answers.
// Another Limiter closed with a ctx that ends during the pause names what
// it still owes (whose script calls, sent before, may still run when the
// pause ends: a lost reply leaves the outcome unknown).
func TestSettledResponseNotHeldByAPausedRedis(t *testing.T) {
	redistest.SkipFaultShort(t)
	srv := redistest.Start(t)
	o := srv.Options() // go-redis's defaults: deadlines are not honoured on the socket
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	st := newRedis(t, client)
	r := meteredRule(t)

	// 250ms: an admission on a busy machine is not failed open, and a
	// settlement attempt on the paused Redis gives up well before the
	// pause ends.
	l := limiter(t, st, interceptor.WithRules(r), interceptor.WithStoreTimeout(250*time.Millisecond))
	g := newGate(7)
	finish := settledCalls(t, serve(t, l, &echo.Server{Before: g.before}, nil), "a", g, 20)
	l2 := limiter(t, st, interceptor.WithRules(r), interceptor.WithStoreTimeout(250*time.Millisecond))
	g2 := newGate(7)
	finish2 := settledCalls(t, serve(t, l2, &echo.Server{Before: g2.before}, nil), "b", g2, 20)

	ends := srv.Pause(t, 3*time.Second) // room for a busy machine: the calls answer and Close gives up within it
	paused := time.Now()
	// Every response came while Redis was still paused: none waited for its
	// settlement (the pause, not a timed bound, is the proof).
	took := append(finish(), finish2()...)
	if time.Now().After(ends) {
		t.Fatalf("the responses came after the pause ended (%v after their handlers returned): held by their settlements, or a machine too busy for a 3s pause", took)
	}
	answered := time.Since(paused)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	closing := time.Now()
	err := l2.Close(short)
	if err == nil || !strings.Contains(err.Error(), "20 settlements and 0 seat releases") {
		t.Errorf("Close during the pause: %v, want the 20 settlements owed named", err)
	}
	// Close gives up at its ctx's end, after the pass in progress, which
	// ends within the store deadline (250ms): well before the pause ends,
	// which it would otherwise wait for.
	if time.Now().After(ends) {
		t.Fatalf("the pause ended before the test looked (the calls answered %s into it, Close took %s): it proves nothing",
			answered, time.Since(closing))
	}
	cctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := l.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := counted(t, st, r); got != 20*7 {
		t.Fatalf("the window counted %d after Close, want 20 × 7 = 140", got)
	}
}

// A client on go-redis's default options (no ContextTimeoutEnabled), a
// store deadline of 50ms, a fail-closed rule with an in-flight bound, Redis
// paused 3s: the call is refused UNAVAILABLE while Redis is still paused.
func TestInFlightFailClosedOnAPausedRedis(t *testing.T) {
	redistest.SkipFaultShort(t)
	srv := redistest.Start(t)
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	st := newRedis(t, client)
	r := rule(t, tollgate.PerSecond(1000))
	r.InFlight.Max, r.FailMode = 4, interceptor.FailClosed
	const deadline = 50 * time.Millisecond
	l := limiter(t, st, interceptor.WithRules(r), interceptor.WithStoreTimeout(deadline))
	c := serve(t, l, &echo.Server{}, nil)
	if _, _, err := say(tenant("a"), c); err != nil {
		t.Fatal(err) // loads the scripts
	}
	ends := srv.Pause(t, 3*time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			start := time.Now()
			_, _, err := say(tenant("a"), c)
			took := time.Since(start)
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call on a paused Redis: %v, want UNAVAILABLE", err)
			}
			// Answered while Redis was still paused: by the store deadline,
			// not by Redis (a timed bound would flake on a busy machine).
			if time.Now().After(ends) {
				t.Errorf("refused after %s, once the pause had ended: the %s store deadline did not bound the call", took, deadline)
			}
		})
	}
	wg.Wait()
	srv.AwaitAnswer(t, 5*time.Second)
}
