package tollgate_test

// Costs known only after the call: the handler reports, the rule settles.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// costHeader carries the cost a test's handler reports.
const costHeader = "x-cost"

// reporting is a handler hook that reports the cost the call's x-cost
// header names.
func reporting(ctx context.Context, _ string) error {
	if v := metadata.ValueFromIncomingContext(ctx, costHeader); len(v) == 1 {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			return status.Error(codes.InvalidArgument, "bad x-cost")
		}
		interceptor.ReportCost(ctx, n)
	}
	return nil
}

// costing is tenant's context asking the handler to report cost.
func costing(tenantName string, cost int64) context.Context {
	return metadata.AppendToOutgoingContext(tenant(tenantName), costHeader, strconv.FormatInt(cost, 10))
}

// waitForMinute lets the current minute end when it has less than left to
// go: a test counting in a minute's fixed window (on the server's clock)
// must not see it end.
func waitForMinute(left time.Duration) {
	if rest := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); rest < left {
		redistest.Elapse(rest + 50*time.Millisecond)
	}
}

// Tokens: 10,000 a minute, 500 reserved per call, each call reporting 100
// to 2,000; 64 callers on 4 replicas sharing one store. What the window
// counted (Peek: used plus owed) is the sum of the admitted calls' reported
// costs, exactly.
func TestSettledTokensAcrossReplicas(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10_000, Period: time.Minute})
		r.Cost, r.Settle = 500, interceptor.SettleReported
		var clients []*echo.Client
		var limiters []*interceptor.Limiter
		for range 4 {
			limiters = append(limiters, limiter(t, st, interceptor.WithRules(r)))
			clients = append(clients, serve(t, limiters[len(limiters)-1], &echo.Server{Before: reporting}, nil))
		}
		waitForMinute(20 * time.Second)
		var reported, admitted, denied atomic.Int64
		var wg sync.WaitGroup
		for i := range 64 {
			c := clients[i%4]
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			wg.Go(func() {
				for {
					cost := 100 + rng.Int64N(1901)
					_, _, err := say(costing("a", cost), c)
					switch status.Code(err) {
					case codes.OK:
						reported.Add(cost)
						admitted.Add(1)
					case codes.ResourceExhausted:
						denied.Add(1)
						return
					default:
						t.Errorf("call: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		for _, l := range limiters {
			if err := l.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		q := peekOne(t, limiter(t, st, interceptor.WithRules(r)), r.Name, interceptor.Caller{Value: "a"}, time.Minute)
		counted := 10_000 - q.Available + q.Decision.Debt
		if counted != reported.Load() {
			t.Fatalf("the window counted %d (%d available, %d owed); the %d admitted calls reported %d",
				counted, q.Available, q.Decision.Debt, admitted.Load(), reported.Load())
		}
		if admitted.Load() < 5 || denied.Load() != 64 {
			t.Fatalf("%d admitted, %d denied: want several admitted and every caller denied in the end", admitted.Load(), denied.Load())
		}
		t.Logf("%d calls admitted, %d tokens reported and counted", admitted.Load(), reported.Load())
	})
}

// A handler that reports its cost and then fails with UNAVAILABLE, retried
// by gRPC's retry policy with one request id: the call is settled once, at
// what it reported.
func TestRetriedCallSettledOnce(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1000, Period: tollgate.MaxPeriod})
		r.Settle = interceptor.SettleReported
		a := &attempts{seen: map[string]int{}}
		c := serve(t, limiter(t, st, interceptor.WithRules(r)),
			&echo.Server{Before: func(ctx context.Context, m string) error {
				interceptor.ReportCost(ctx, 50)
				return a.before(ctx, m)
			}}, nil,
			retryPolicy(3, "0.01s", "UNAVAILABLE"), grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor()))
		for i := range 3 {
			if _, _, err := say(tenant("a"), c); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		for id, n := range a.seen {
			if n != 2 {
				t.Fatalf("request %s: %d attempts, want 2", id, n)
			}
		}
		q := peekOne(t, limiter(t, st, interceptor.WithRules(r)), r.Name, interceptor.Caller{Value: "a"}, tollgate.MaxPeriod)
		if q.Available != 1000-3*50 {
			t.Fatalf("%d available after 3 calls of 50, each attempted twice; want 850: a call was settled twice", q.Available)
		}
	})
}

// Debt: a 10/s bucket, a call reserving 1 and reporting 50. The next call
// is denied with a RetryAfter of the exact repayment time (41 units of
// refill: 4.1s) and admitted after it, not before.
func TestSettledDebtIsRepaid(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		t.Parallel()
		r := rule(t, tollgate.Limit{Rate: 10, Period: time.Second})
		r.Settle = interceptor.SettleReported
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, &echo.Server{Before: reporting}, nil)
		start := time.Now() // before the settlement
		if _, _, err := say(costing("a", 50), c); err != nil {
			t.Fatal(err)
		}
		if err := l.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if q := peekOne(t, l, r.Name, interceptor.Caller{Value: "a"}, time.Second); q.Decision.Debt != 40 || q.Available != 0 {
			t.Fatalf("after a call reporting 50 of 10: %+v; want 40 owed", q)
		}
		_, _, err := say(tenant("a"), c)
		retry, _ := grpctest.DenialDetails(wantCode(t, err, codes.ResourceExhausted, "exceeded"))
		wait := retry.GetRetryDelay().AsDuration()
		if lo, hi := 4100*time.Millisecond-time.Since(start), 4100*time.Millisecond; wait < lo || wait > hi {
			t.Fatalf("RetryInfo %s, want the repayment time, in [%s, %s]", wait, lo, hi)
		}
		// The debt is repaid on the store's clock (Redis's own): the test
		// asks just before and just after.
		due := time.Now().Add(wait)
		redistest.Elapse(time.Until(due) - 200*time.Millisecond)
		_, _, err = say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, "exceeded")
		redistest.Elapse(time.Until(due) + 20*time.Millisecond)
		if _, _, err := say(tenant("a"), c); err != nil {
			t.Fatalf("a call once the debt is repaid: %v", err)
		}
	})
}

// Failures only: 5 failed logins per 15 minutes. 100 successful logins
// cost nothing; then 5 failures use the quota and the 6th attempt is
// refused before its handler runs.
func TestOnlyFailuresCount(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.FixedWindow} {
			r := rule(t, tollgate.Limit{Algorithm: alg, Rate: 5, Period: 15 * time.Minute})
			r.Name += "/" + alg.String()
			r.Settle = interceptor.SettleFailures(codes.Unauthenticated)
			var ran atomic.Int64
			c := serve(t, limiter(t, st, interceptor.WithRules(r)), &echo.Server{Before: func(ctx context.Context, _ string) error {
				ran.Add(1)
				if metadata.ValueFromIncomingContext(ctx, "x-password")[0] != "right" {
					return status.Error(codes.Unauthenticated, "wrong password")
				}
				return nil
			}}, nil)
			login := func(password string) error {
				_, _, err := say(metadata.AppendToOutgoingContext(tenant("alice"), "x-password", password), c)
				return err
			}
			for i := range 100 {
				if err := login("right"); err != nil {
					t.Fatalf("%s: login %d: %v", alg, i+1, err)
				}
			}
			for i := range 5 {
				if err := login("wrong"); status.Code(err) != codes.Unauthenticated {
					t.Fatalf("%s: failure %d: %v, want Unauthenticated", alg, i+1, err)
				}
			}
			before := ran.Load()
			wantCode(t, login("wrong"), codes.ResourceExhausted, "exceeded")
			wantCode(t, login("right"), codes.ResourceExhausted, "exceeded")
			if ran.Load() != before {
				t.Fatalf("%s: a refused login reached the handler", alg)
			}
		}
	})
}
