package interceptor_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"github.com/redis/go-redis/v9"
	otelcodes "go.opentelemetry.io/otel/codes"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// answerMargin is how much longer than the store deadline a call may take
// when the store is down: generous, because the race detector and other
// tests share the machine. It guards against waiting on Redis's own
// timeouts (seconds), not against slowness.
const answerMargin = 2 * time.Second

// storeTimeout is the store deadline of these tests: short enough to show
// that a hung Redis costs a call no more than it, long enough that a
// healthy Redis on a machine busy with race-enabled tests answers within it.
const storeTimeout = 500 * time.Millisecond

// deadStoreTimeout is the store deadline against a closed port, where no
// call can succeed: go-redis keeps re-dialling until the deadline.
const deadStoreTimeout = 100 * time.Millisecond

// redisClient returns a client for addr that honours context deadlines, as
// the interceptor's store deadline needs.
func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestFailModesWithRedisDown(t *testing.T) {
	for _, tc := range []struct {
		mode    interceptor.FailMode
		outcome string
	}{
		{interceptor.FailOpen, "fail_open"},
		{interceptor.FailClosed, "fail_closed"},
		{engine.FailLocal, "fail_local"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			tp, sr := tracer(t)
			m := newMeter(t)
			r := perTenant()
			r.FailMode = tc.mode
			r.Limits = interceptor.Fixed(tollgate.PerHour(4))
			l := newLimiter(t, newRedis(t, redisClient(t, closedPort(t))), interceptor.WithRules(r), interceptor.WithAdmittedTrailers(),
				func(c *engine.Config) { c.Replicas = 2 }, func(c *engine.Config) { c.LocalStore = newMemory(t) }, // FailLocal: 4 an hour across 2 replicas is 2 here
				interceptor.WithStoreTimeout(deadStoreTimeout), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = -1, 0 },
				func(c *engine.Config) { c.TracerProvider = tp }, func(c *engine.Config) { c.MeterProvider = m.provider })
			c := serve(t, l)
			ctx := tenant(context.Background(), "a")
			var admitted int
			for range 3 {
				start := time.Now()
				trailer, _, err := say(ctx, c, "hi")
				if elapsed := time.Since(start); elapsed > deadStoreTimeout+answerMargin {
					t.Fatalf("the call took %s with Redis down, more than its deadline %s + %s", elapsed, deadStoreTimeout, answerMargin)
				}
				switch tc.mode {
				case interceptor.FailOpen:
					if err != nil {
						t.Fatalf("FailOpen refused: %v", err)
					}
					if len(trailer.Get(fields.LegacyRemaining)) != 0 {
						t.Errorf("FailOpen sent rate-limit trailers with no decision: %v", trailer)
					}
				case interceptor.FailClosed:
					wantCode(t, err, codes.Unavailable, `rate limit "per-tenant": rate limiter unavailable`)
				case engine.FailLocal:
					if err == nil {
						if one(t, trailer, fields.LegacyLimit) != "2" {
							t.Errorf("local limit trailer %v, want 2", trailer)
						}
					} else {
						wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded`)
					}
				}
				if err == nil {
					admitted++
				}
			}
			want := map[interceptor.FailMode]int{interceptor.FailOpen: 3, interceptor.FailClosed: 0, engine.FailLocal: 2}[tc.mode]
			if admitted != want {
				t.Errorf("admitted %d of 3, want %d", admitted, want)
			}
			d := m.decisions(t)
			var total int64
			for _, v := range d {
				total += v
			}
			if total != 3 || d[fmt.Sprintf("per-tenant/call/%s/true", tc.outcome)] != int64(want) {
				t.Errorf("decisions %v, want 3 %s of which %d allowed", d, tc.outcome, want)
			}
			if sc := m.storeCalls(t); sc["per-tenant/error"] != 3 {
				t.Errorf("store calls %v, want 3 errors", sc)
			}
			for _, s := range sr.Ended() {
				a := spanAttrs(s)
				if a[telemetry.AttrFailMode] != tc.mode.String() || s.Status().Code != otelcodes.Error {
					t.Errorf("span %s: fail mode %q status %v, want %q and Error", s.Name(), a[telemetry.AttrFailMode], s.Status(), tc.mode)
				}
			}
		})
	}
}

// A Redis that stops answering (CLIENT PAUSE) costs each call no more than
// the store deadline, and the breaker then stops waiting at all.
func TestHungRedisAndBreaker(t *testing.T) {
	srv := redistest.Start(t)
	m := newMeter(t)
	r := perTenant()
	r.FailMode = interceptor.FailClosed
	r.Limits = interceptor.Fixed(tollgate.PerHour(1000))
	const coolDown = 200 * time.Millisecond
	st := newRedis(t, redisClient(t, srv.Addr()))
	// Load the script and open a connection before the clock matters.
	if _, err := st.Allow(context.Background(), tollgate.Request{Key: "warm-up", Limit: tollgate.PerHour(1)}); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, st, interceptor.WithRules(r),
		interceptor.WithStoreTimeout(storeTimeout), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = 3, coolDown },
		func(c *engine.Config) { c.MeterProvider = m.provider })
	c := serve(t, l)
	ctx := tenant(context.Background(), "a")
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}

	admin := redisClient(t, srv.Addr())
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "60000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		_, _, err := say(ctx, c, "hi")
		if elapsed := time.Since(start); elapsed > storeTimeout+answerMargin {
			t.Fatalf("call %d took %s on a hung Redis, more than its deadline %s + %s", i, elapsed, storeTimeout, answerMargin)
		}
		wantCode(t, err, codes.Unavailable, "rate limiter unavailable")
	}
	// Three failures opened the breaker: these calls do not reach the store.
	for range 5 {
		_, _, err := say(ctx, c, "hi")
		wantCode(t, err, codes.Unavailable, "rate limiter unavailable")
	}
	if sc := m.storeCalls(t); sc["per-tenant/error"] != 3 || sc["per-tenant/ok"] != 1 {
		t.Fatalf("store calls %v, want 1 ok and 3 errors: the breaker should keep calls from the store", sc)
	}
	// The latency and the deadline are measured from one instant, so a
	// call that ran into the deadline records at least the timeout.
	if minimum, ok := m.storeDurations(t)["per-tenant/error"].Min.Value(); !ok || minimum < storeTimeout.Seconds() {
		t.Fatalf("shortest timed-out store call recorded %gs (recorded: %v), want at least the store timeout %s", minimum, ok, storeTimeout)
	}

	// Redis comes back (a restart: the paused one is killed). After the
	// cool-down one call probes, succeeds and closes the breaker.
	srv.Restart(t)
	redistest.Eventually(t, 10*time.Second, func() error {
		_, _, err := say(ctx, c, "hi")
		if err == nil {
			return nil
		}
		// Until the cool-down ends the breaker answers alone; the first
		// probe may still find a pooled connection to the old process, and
		// the breaker opens again until the next probe succeeds.
		wantCode(t, err, codes.Unavailable, "rate limiter unavailable")
		return fmt.Errorf("the breaker never closed after Redis came back: %v", m.storeCalls(t))
	})
	for i := range 5 {
		if _, _, err := say(ctx, c, "hi"); err != nil {
			t.Fatalf("call %d after recovery: %v", i, err)
		}
	}
	if sc := m.storeCalls(t); sc["per-tenant/ok"] < 7 {
		t.Fatalf("store calls %v, want the 6 calls after recovery decided by the store", sc)
	}
}

// invalidStore rejects every request as invalid: a configuration bug.
type invalidStore struct {
	tollgate.Store // methods other than Allow are not used
	calls          atomic.Int64
}

func (s *invalidStore) Allow(context.Context, tollgate.Request) (tollgate.Decision, error) {
	s.calls.Add(1)
	return tollgate.Decision{}, fmt.Errorf("%w: the store refused it", tollgate.ErrInvalidRequest)
}

// ErrInvalidRequest from the store is the server's bug: codes.Internal, and
// never a reason to open the breaker.
func TestStoreInvalidRequestIsInternal(t *testing.T) {
	st := &invalidStore{}
	r := perTenant()
	r.FailMode = interceptor.FailOpen
	c := serve(t, newLimiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = 1, time.Hour }))
	for range 5 {
		_, _, err := say(tenant(context.Background(), "a"), c, "hi")
		wantCode(t, err, codes.Internal, "the limiter is misconfigured")
	}
	if n := st.calls.Load(); n != 5 {
		t.Fatalf("store called %d times, want 5: ErrInvalidRequest must not open the breaker", n)
	}
}
