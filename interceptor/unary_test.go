package interceptor_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/keyfunc"
)

// perTenant limits Say to 3 calls an hour per tenant: nothing refills
// during a test, so counts are exact.
func perTenant() interceptor.Rule {
	return interceptor.Rule{
		Name:    "per-tenant",
		Methods: []string{echo.SayMethod},
		Key:     keyfunc.Metadata(tenantHeader),
		Limits:  interceptor.Fixed(tollgate.PerHour(3)),
	}
}

func newLimiter(t *testing.T, st tollgate.Store, opts ...interceptor.Option) *interceptor.Limiter {
	t.Helper()
	l, err := interceptor.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeLimiter(t, l) })
	return l
}

// closeLimiter closes l, delivering what its calls owe, and fails the test
// when it could not.
func closeLimiter(t *testing.T, l *interceptor.Limiter) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestPerTenantQuotaAndRichDenial(t *testing.T) {
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(perTenant()), interceptor.WithAdmittedTrailers()))
	ctx := context.Background()
	a := tenant(ctx, "a")
	for i := range 3 {
		trailer, header, err := say(a, c, "hi")
		if err != nil {
			t.Fatalf("call %d of tenant a: %v", i+1, err)
		}
		noRateLimitHeaders(t, header)
		if got, want := one(t, trailer, fields.LegacyRemaining), strconv.Itoa(2-i); got != want {
			t.Errorf("call %d: remaining = %s, want %s", i+1, got, want)
		}
		if got := one(t, trailer, fields.LegacyLimit); got != "3" {
			t.Errorf("call %d: limit = %s, want 3", i+1, got)
		}
		// 3 an hour: each unit takes 20 minutes to come back.
		if got, want := one(t, trailer, fields.LegacyReset), strconv.Itoa((i+1)*1200); got != want {
			t.Errorf("call %d: reset = %s, want %s", i+1, got, want)
		}
		if v := trailer.Get(fields.RetryAfter); len(v) != 0 {
			t.Errorf("admitted call has retry-after %q", v)
		}
	}

	trailer, header, err := say(a, c, "hi")
	noRateLimitHeaders(t, header)
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded: retry after `)
	retry, quota := grpctest.DenialDetails(st)
	if retry == nil || quota == nil {
		t.Fatalf("details = %v, want RetryInfo and QuotaFailure", st.Details())
	}
	delay := retry.GetRetryDelay().AsDuration()
	if delay <= 19*time.Minute || delay > 20*time.Minute {
		t.Errorf("RetryInfo delay = %s, want just under 20m", delay)
	}
	v := quota.GetViolations()
	if len(v) != 1 || v[0].GetSubject() != "rule:per-tenant" || v[0].GetQuotaId() != "per-tenant" || v[0].GetQuotaValue() != 3 ||
		!strings.Contains(v[0].GetDescription(), "token_bucket 3/1h0m0s burst 3 exceeded") {
		t.Errorf("QuotaFailure = %v", quota)
	}
	if strings.Contains(st.Message()+quota.String(), `"a"`) {
		t.Errorf("the denial names the caller's identity: %s %v", st.Message(), quota)
	}
	ms, _ := strconv.ParseInt(one(t, trailer, fields.Pushback), 10, 64)
	if want := (delay + time.Millisecond - 1).Milliseconds(); ms != want {
		t.Errorf("pushback = %dms, want RetryInfo rounded up to %dms", ms, want)
	}
	if got, want := one(t, trailer, fields.RetryAfter), "1200"; got != want {
		t.Errorf("retry-after = %s, want %s", got, want)
	}
	if got := one(t, trailer, fields.LegacyRemaining); got != "0" {
		t.Errorf("remaining after denial = %s, want 0", got)
	}

	// Tenant b has its own bucket.
	b := tenant(ctx, "b")
	for i := range 3 {
		if _, _, err := say(b, c, "hi"); err != nil {
			t.Fatalf("call %d of tenant b: %v", i+1, err)
		}
	}
	_, _, err = say(b, c, "hi")
	wantCode(t, err, codes.ResourceExhausted, "per-tenant")
}

func TestUnmatchedMethodsAreNotLimited(t *testing.T) {
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(perTenant())))
	ctx := tenant(context.Background(), "a")
	for i := range 10 {
		var trailer metadata.MD
		s, err := c.Count(ctx, 1, grpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if _, err := s.Recv(); err == nil {
			t.Fatal("want io.EOF")
		}
		if len(trailer.Get(fields.LegacyRemaining)) != 0 {
			t.Fatalf("unmatched method got rate-limit trailers: %v", trailer)
		}
	}
}

func TestMissingKey(t *testing.T) {
	reject := perTenant()
	share := perTenant()
	share.Name, share.Methods, share.ShareMissing = "shared", []string{echo.CountMethod}, true
	share.Limits = interceptor.Fixed(tollgate.PerHour(2))
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(reject, share)))
	ctx := context.Background()

	_, _, err := say(ctx, c, "who am I")
	wantCode(t, err, codes.InvalidArgument, `rate limit "per-tenant" cannot identify the caller`)
	wantCode(t, err, codes.InvalidArgument, tenantHeader)
	// An empty value is missing too.
	_, _, err = say(tenant(ctx, ""), c, "hi")
	wantCode(t, err, codes.InvalidArgument, "per-tenant")

	// Anonymous callers share one bucket of 2, apart from tenant "a".
	count := func(ctx context.Context) error {
		s, err := c.Count(ctx, 0)
		if err != nil {
			return err
		}
		if _, err = s.Recv(); errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	for i := range 2 {
		if err := count(ctx); err != nil {
			t.Fatalf("anonymous stream %d: %v", i+1, err)
		}
	}
	wantCode(t, count(ctx), codes.ResourceExhausted, `rate limit "shared" exceeded`)
	if err := count(tenant(ctx, "a")); err != nil {
		t.Fatalf("tenant a after the anonymous bucket ran out: %v", err)
	}
}

func TestOversizedKeyIsInvalidArgument(t *testing.T) {
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(perTenant())))
	_, _, err := say(tenant(context.Background(), strings.Repeat("t", keyfunc.MaxValueLen+1)), c, "hi")
	wantCode(t, err, codes.InvalidArgument, `rate limit "per-tenant" cannot identify the caller`)
}

func TestKeyFuncErrors(t *testing.T) {
	denied := status.Error(codes.PermissionDenied, "no such tenant")
	rules := []interceptor.Rule{
		{Name: "status", Methods: []string{echo.SayMethod}, Limits: interceptor.Fixed(tollgate.PerHour(1)),
			Key: func(context.Context, keyfunc.Call) (string, error) { return "", denied }},
		{Name: "plain", Methods: []string{echo.CountMethod}, Limits: interceptor.Fixed(tollgate.PerHour(1)),
			Key: func(context.Context, keyfunc.Call) (string, error) { return "", context.Canceled }},
	}
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(rules...)))
	_, _, err := say(context.Background(), c, "hi")
	wantCode(t, err, codes.PermissionDenied, "no such tenant")
	s, err := c.Count(context.Background(), 1)
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.Internal, `rate limit "plain": key function failed`)
}

func TestRequestIDReplay(t *testing.T) {
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(perTenant()), interceptor.WithAdmittedTrailers()))
	ctx := metadata.AppendToOutgoingContext(tenant(context.Background(), "a"), idempotency.DefaultHeader, "call-1")
	trailer, _, err := say(ctx, c, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if got := one(t, trailer, fields.LegacyRemaining); got != "2" {
		t.Fatalf("remaining = %s, want 2", got)
	}
	trailer, _, err = say(ctx, c, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if got := one(t, trailer, fields.LegacyRemaining); got != "2" {
		t.Errorf("remaining after a replay = %s, want 2: a retry must not be debited", got)
	}
	if got := one(t, trailer, fields.Replayed); got != "1" {
		t.Errorf("replayed = %q, want 1", got)
	}

	bad := metadata.AppendToOutgoingContext(tenant(context.Background(), "a"), idempotency.DefaultHeader, strings.Repeat("x", tollgate.MaxRequestIDLen+1))
	_, _, err = say(bad, c, "hi")
	wantCode(t, err, codes.InvalidArgument, `rate limit "per-tenant": malformed request id: header "x-request-id"`)
}

func TestCostFunc(t *testing.T) {
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.PerHour(10))
	r.CostFunc = func(_ context.Context, method string, req any) int64 {
		if method != echo.SayMethod {
			panic(method)
		}
		v := req.(*wrapperspb.StringValue).GetValue()
		if v == "negative" {
			return -1
		}
		return int64(len(v))
	}
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(r), interceptor.WithAdmittedTrailers()))
	ctx := tenant(context.Background(), "a")
	trailer, _, err := say(ctx, c, "four")
	if err != nil {
		t.Fatal(err)
	}
	if got := one(t, trailer, fields.LegacyRemaining); got != "6" {
		t.Errorf("remaining after a cost of 4 = %s, want 6", got)
	}
	// An empty message costs 0, which means 1.
	if trailer, _, err = say(ctx, c, ""); err != nil || one(t, trailer, fields.LegacyRemaining) != "5" {
		t.Errorf("cost 0: err %v, trailer %v; want remaining 5", err, trailer)
	}
	_, _, err = say(ctx, c, "eleven char")
	wantCode(t, err, codes.InvalidArgument, `the request costs 11, more than the 10 it can ever admit at once`)
	_, _, err = say(ctx, c, "negative")
	wantCode(t, err, codes.Internal, "CostFunc returned -1")
	// 5 left: a cost of 6 is denied with the wait for 1 more unit, 6
	// minutes less what refilled since.
	_, _, err = say(ctx, c, "sixsix")
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded: retry after `)
	if d := st.Details(); len(d) == 0 {
		t.Error("no details")
	} else if wait := d[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration(); wait <= 5*time.Minute+59*time.Second || wait > 6*time.Minute {
		t.Errorf("RetryInfo %s, want just under 6m", wait)
	}
}

// TestPerCallerLimit: one limit chosen per caller.
func TestPerCallerLimit(t *testing.T) {
	r := perTenant()
	r.Limits = engine.PerCaller(func(_ context.Context, key string) ([]tollgate.Limit, error) {
		switch key {
		case "gold":
			return []tollgate.Limit{tollgate.PerHour(5)}, nil
		case "broken":
			return []tollgate.Limit{{Rate: -1, Period: time.Second}}, nil
		case "unknown":
			return nil, status.Error(codes.PermissionDenied, "unknown tenant")
		}
		return []tollgate.Limit{tollgate.PerHour(1)}, nil
	})
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(r), interceptor.WithAdmittedTrailers()))
	ctx := context.Background()
	admitted := func(name string) int {
		n := 0
		for range 10 {
			trailer, _, err := say(tenant(ctx, name), c, "hi")
			if err != nil {
				wantCode(t, err, codes.ResourceExhausted, "per-tenant")
				return n
			}
			want := "1"
			if name == "gold" {
				want = "5"
			}
			if got := one(t, trailer, fields.LegacyLimit); got != want {
				t.Errorf("%s: limit trailer %s, want %s", name, got, want)
			}
			n++
		}
		return n
	}
	if n := admitted("gold"); n != 5 {
		t.Errorf("gold admitted %d, want 5", n)
	}
	if n := admitted("free"); n != 1 {
		t.Errorf("free admitted %d, want 1", n)
	}
	_, _, err := say(tenant(ctx, "broken"), c, "hi")
	wantCode(t, err, codes.Internal, "PerCaller returned an invalid limit")
	_, _, err = say(tenant(ctx, "unknown"), c, "hi")
	wantCode(t, err, codes.PermissionDenied, "unknown tenant")
}

// Many goroutines on one tenant, through two Limiters (two replicas) on one
// store, admit exactly the quota.
func TestConcurrentCallsAdmitExactlyTheQuota(t *testing.T) {
	st := newMemory(t)
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.PerHour(100))
	clients := []*echo.Client{
		serve(t, newLimiter(t, st, interceptor.WithRules(r))),
		serve(t, newLimiter(t, st, interceptor.WithRules(r))),
	}
	const goroutines, calls = 40, 5
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	ctx := tenant(context.Background(), "hot")
	for g := range goroutines {
		wg.Go(func() {
			for range calls {
				_, _, err := say(ctx, clients[g%2], "hi")
				switch status.Code(err) {
				case codes.OK:
					admitted.Add(1)
				case codes.ResourceExhausted:
					denied.Add(1)
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 100 || denied.Load() != goroutines*calls-100 {
		t.Fatalf("admitted %d, denied %d; want exactly 100 and %d", admitted.Load(), denied.Load(), goroutines*calls-100)
	}
}

// go-grpc-middleware's ratelimit interceptor with the adapter: the same
// decisions and trailers, but the status is flattened to text.
func TestMiddlewareLimiterAdapter(t *testing.T) {
	l := newLimiter(t, newMemory(t), interceptor.WithRules(perTenant()), interceptor.WithAdmittedTrailers())
	c := serveWith(t, &echo.Server{}, grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(l.MiddlewareLimiter())))
	ctx := tenant(context.Background(), "a")
	for i := range 3 {
		trailer, _, err := say(ctx, c, "hi")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := one(t, trailer, fields.LegacyRemaining), strconv.Itoa(2-i); got != want {
			t.Errorf("remaining = %s, want %s", got, want)
		}
	}
	trailer, _, err := say(ctx, c, "hi")
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded`)
	if len(st.Details()) != 0 {
		t.Errorf("the ratelimit middleware now keeps details (%v): update the adapter's doc", st.Details())
	}
	if one(t, trailer, fields.Pushback) == "" {
		t.Error("no pushback trailer through the adapter")
	}
	_, _, err = say(context.Background(), c, "hi")
	wantCode(t, err, codes.ResourceExhausted, "cannot identify the caller") // flattened from InvalidArgument
}
