package tollgate_test

// End-to-end tests: the whole chain in one process, real gRPC over bufconn,
// real Redis (a redis-server started by internal/redistest, or REDIS_URL).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const tenantHeader = "x-tenant"

// redisStore returns a Redis store on the shared single node. The client
// honours context deadlines, which the limiter's store deadline relies on.
func redisStore(t *testing.T) tollgate.Store {
	o := redistest.Single(t).Options()
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return newRedis(t, c)
}

// clusterStore returns a Redis store with opts on the shared 3-primary
// Cluster, with a client that honours context deadlines too. The root
// tests run on it in the default key layout and in the tagged one
// (store.WithClusterTags), where decisions behind one shared tag share
// batch script calls.
func clusterStore(t *testing.T, opts ...store.RedisOption) tollgate.Store {
	o := redistest.SharedCluster(t).Options()
	o.ContextTimeoutEnabled = true
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return newRedis(t, c, opts...)
}

// rule limits Say per tenant; the rule name is unique per test and run, so
// tests sharing a Redis server (even one given by REDIS_URL) never share
// buckets.
func rule(t *testing.T, limit tollgate.Limit) interceptor.Rule {
	return interceptor.Rule{
		Name:    "per-tenant " + redistest.KeyPrefix(t),
		Methods: []string{echo.SayMethod},
		Key:     keyfunc.Metadata(tenantHeader),
		Limits:  interceptor.Fixed(limit),
	}
}

// limiter returns a Limiter on st. Its store deadline is generous unless
// opts say otherwise: these tests run beside others under the race
// detector, and a slow first script load must not turn into a fail-open.
// Admitted calls carry the x-ratelimit-* trailers, which the tests count.
func limiter(t *testing.T, st tollgate.Store, opts ...interceptor.Option) *interceptor.Limiter {
	opts = append([]interceptor.Option{interceptor.WithStoreTimeout(5 * time.Second), interceptor.WithAdmittedTrailers()}, opts...)
	l, err := interceptor.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// serve runs srv behind l over bufconn and returns a client connection
// dialled with dialOpts; everything stops when the test ends.
func serve(t *testing.T, l *interceptor.Limiter, srv *echo.Server, serverOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *echo.Client {
	t.Helper()
	serverOpts = append(serverOpts,
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()))
	return echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, srv) }, serverOpts, dialOpts...))
}

func tenant(name string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), tenantHeader, name)
}

func say(ctx context.Context, c *echo.Client) (trailer, header metadata.MD, err error) {
	_, err = c.Say(ctx, wrapperspb.String("hi"), grpc.Trailer(&trailer), grpc.Header(&header))
	return trailer, header, err
}

func one(t *testing.T, md metadata.MD, key string) string {
	t.Helper()
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	}
	t.Fatalf("metadata %q = %q, want one value (all: %v)", key, md.Get(key), md)
	return ""
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) *status.Status {
	t.Helper()
	if err := hasCode(err, code, msg); err != nil {
		t.Fatal(err)
	}
	st, _ := status.FromError(err)
	return st
}

// hasCode returns nil when err is code with a message containing msg, and
// says what err is otherwise: a condition for redistest.Eventually.
func hasCode(err error, code codes.Code, msg string) error {
	if st, _ := status.FromError(err); st.Code() != code || !strings.Contains(st.Message(), msg) {
		return fmt.Errorf("error %v, want %s containing %q", err, code, msg)
	}
	return nil
}

// Tenant a exhausts its quota through two replicas hammering Redis at once;
// tenant b is unaffected. Exact counts, on a single node and on a Cluster.
func TestPerTenantQuotasAcrossReplicas(t *testing.T) {
	for name, newStore := range map[string]func(*testing.T) tollgate.Store{"single": redisStore, "cluster": func(t *testing.T) tollgate.Store { return clusterStore(t) }} {
		t.Run(name, func(t *testing.T) {
			r := rule(t, tollgate.PerHour(50))
			// Two replicas, each with its own Redis client: one quota.
			clients := []*echo.Client{
				serve(t, limiter(t, newStore(t), interceptor.WithRules(r)), &echo.Server{}, nil),
				serve(t, limiter(t, newStore(t), interceptor.WithRules(r)), &echo.Server{}, nil),
			}
			const goroutines, calls = 20, 5
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for range calls {
						_, _, err := say(tenant("a"), clients[g%2])
						switch status.Code(err) {
						case codes.OK:
							admitted.Add(1)
						case codes.ResourceExhausted:
							denied.Add(1)
						default:
							t.Errorf("call: %v", err)
						}
					}
				})
			}
			wg.Wait()
			if admitted.Load() != 50 || denied.Load() != 50 {
				t.Fatalf("tenant a: %d admitted, %d denied; want exactly 50 and 50", admitted.Load(), denied.Load())
			}
			for i := range 50 {
				trailer, _, err := say(tenant("b"), clients[i%2])
				if err != nil {
					t.Fatalf("tenant b call %d: %v", i+1, err)
				}
				if got, want := one(t, trailer, fields.LegacyRemaining), strconv.Itoa(49-i); got != want {
					t.Fatalf("tenant b call %d: remaining %s, want %s", i+1, got, want)
				}
			}
		})
	}
}

// What a real client sees on denial: the status with RetryInfo and
// QuotaFailure, the trailers, and no rate-limit headers. The test logs it
// (go test -v -run RichDenial .) for the README.
func TestRichDenialSeenByClient(t *testing.T) {
	r := rule(t, tollgate.Limit{Rate: 10, Period: time.Minute, Burst: 2})
	r.Name = "per-tenant"
	st := redisStore(t)
	// A fresh bucket for this run, whatever the shared server holds.
	c := serve(t, limiter(t, st, interceptor.WithRules(r)), &echo.Server{}, nil)
	ctx := tenant(redistest.KeyPrefix(t) + "acme")
	for range 2 {
		if _, _, err := say(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	trailer, header, err := say(ctx, c)
	s := wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded: retry after `)
	for k := range header {
		if strings.HasPrefix(k, "x-ratelimit") || strings.HasPrefix(k, "ratelimit") || k == "retry-after" || k == "grpc-retry-pushback-ms" {
			t.Fatalf("rate-limit metadata in headers: %v", header)
		}
	}
	retry, quota := grpctest.DenialDetails(s)
	if retry == nil || quota == nil {
		t.Fatalf("details %v, want RetryInfo and QuotaFailure", s.Details())
	}
	// 10 a minute: one unit every 6s.
	if d := retry.GetRetryDelay().AsDuration(); d <= 0 || d > 6*time.Second {
		t.Errorf("RetryInfo delay %s, want (0, 6s]", d)
	}
	if one(t, trailer, fields.RetryAfter) != "6" && one(t, trailer, fields.RetryAfter) != "5" {
		t.Errorf("retry-after %v", trailer)
	}
	if one(t, trailer, fields.LegacyLimit) != "2" || one(t, trailer, fields.LegacyRemaining) != "0" {
		t.Errorf("trailers %v", trailer)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "code: %s\nmessage: %s\n", s.Code(), s.Message())
	for _, d := range s.Details() {
		fmt.Fprintf(&b, "details: %T %s\n", d, protojson.Format(d.(proto.Message)))
	}
	for _, k := range []string{fields.Pushback, fields.RetryAfter, fields.PolicyKey, fields.StateKey, fields.LegacyLimit, fields.LegacyRemaining, fields.LegacyReset} {
		fmt.Fprintf(&b, "trailer %s: %s\n", k, one(t, trailer, k))
	}
	t.Logf("what the client saw:\n%s", b.String())
}

// retryPolicy makes gRPC retry the echo service's calls that end with one of
// codes, up to attempts in all, backoff apart (unless a pushback says
// otherwise).
func retryPolicy(attempts int, backoff string, codes ...string) grpc.DialOption {
	return grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"methodConfig": [{"name": [{"service": %q}],
		"retryPolicy": {"maxAttempts": %d, "initialBackoff": %q, "maxBackoff": %[3]q, "backoffMultiplier": 1,
		"retryableStatusCodes": ["%s"]}}]}`, echo.ServiceName, attempts, backoff, strings.Join(codes, `", "`)))
}

// attempts counts the attempts the handler saw, by request id, and fails
// the first attempt of every call with UNAVAILABLE.
type attempts struct {
	mu   sync.Mutex
	seen map[string]int
}

func (a *attempts) before(ctx context.Context, _ string) error {
	id := metadata.ValueFromIncomingContext(ctx, idempotency.DefaultHeader)
	if len(id) != 1 {
		return status.Error(codes.FailedPrecondition, "no request id")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[id[0]]++
	if a.seen[id[0]] == 1 {
		return status.Error(codes.Unavailable, "first attempt fails")
	}
	return nil
}

// A handler that fails the first attempt with UNAVAILABLE, a client with a
// retry policy and the idempotency interceptor: every logical call is
// debited exactly once, though the limiter admitted two attempts of each.
func TestRetriedCallsAreDebitedOnce(t *testing.T) {
	a := &attempts{seen: map[string]int{}}
	c := serve(t, limiter(t, redisStore(t), interceptor.WithRules(rule(t, tollgate.PerHour(5)))),
		&echo.Server{Before: a.before}, nil,
		retryPolicy(3, "0.01s", "UNAVAILABLE"), grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor()))
	for i := range 5 {
		trailer, header, err := say(tenant("a"), c)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got, want := one(t, trailer, fields.LegacyRemaining), strconv.Itoa(4-i); got != want {
			t.Fatalf("call %d: remaining %s, want %s: a retried call was debited twice", i+1, got, want)
		}
		if one(t, trailer, fields.Replayed) != "1" {
			t.Errorf("call %d: the retry was not replayed: %v", i+1, trailer)
		}
		if len(header.Get(fields.LegacyRemaining)) != 0 {
			t.Errorf("rate-limit metadata in headers: %v", header)
		}
	}
	if len(a.seen) != 5 {
		t.Fatalf("%d logical calls reached the handler, want 5", len(a.seen))
	}
	for id, n := range a.seen {
		if n != 2 {
			t.Errorf("request %s: %d attempts, want 2", id, n)
		}
	}
	_, _, err := say(tenant("a"), c)
	wantCode(t, err, codes.ResourceExhausted, "exceeded")
}

// A denial's grpc-retry-pushback-ms is what gRPC's retry policy waits: the
// second attempt comes after the exact wait and is admitted.
func TestClientRetryHonoursPushback(t *testing.T) {
	// One call every 50ms, no burst.
	l := limiter(t, redisStore(t), interceptor.WithRules(rule(t, tollgate.Limit{Rate: 20, Period: time.Second, Burst: 1})))
	var denied atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if status.Code(err) == codes.ResourceExhausted {
			denied.Add(1)
		}
		return resp, err
	}
	c := serve(t, l, &echo.Server{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count)},
		retryPolicy(3, "0.01s", "UNAVAILABLE", "RESOURCE_EXHAUSTED"), grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor()))
	for i := range 3 {
		if _, _, err := say(tenant("a"), c); err != nil {
			t.Fatalf("call %d: %v (pushback not honoured?)", i+1, err)
		}
	}
	if denied.Load() == 0 {
		t.Fatal("no attempt was denied: the calls came slower than the limit and prove nothing")
	}
}

// Streams pay once at open, and per message under PerMessage: police fails
// the stream, shape holds messages back until they fit.
func TestStreamLimits(t *testing.T) {
	police := tollgate.Limit{Rate: 1, Period: time.Hour, Burst: 3}
	shape := tollgate.Limit{Rate: 10, Period: time.Second, Burst: 1} // one message every 100ms
	rules := []interceptor.Rule{
		{Name: "chat " + redistest.KeyPrefix(t), Methods: []string{echo.ChatMethod}, Key: keyfunc.Metadata(tenantHeader),
			Limits: interceptor.Fixed(tollgate.PerHour(2)), PerMessage: engine.MessageLimit{Limit: police}},
		{Name: "count " + redistest.KeyPrefix(t), Methods: []string{echo.CountMethod}, Key: keyfunc.Metadata(tenantHeader),
			Limits: interceptor.Fixed(tollgate.PerHour(1))},
	}
	c := serve(t, limiter(t, redisStore(t), interceptor.WithRules(rules...)), &echo.Server{}, nil)

	// Open: Count may be opened once an hour.
	s, err := c.Count(tenant("a"), 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Recv(); err != nil {
			t.Fatalf("count message %d: %v", i, err)
		}
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of count: %v", err)
	}
	if one(t, s.Trailer(), fields.LegacyRemaining) != "0" {
		t.Errorf("count trailers %v", s.Trailer())
	}
	s, err = c.Count(tenant("a"), 3)
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, `rate limit "count `)

	// Police: 3 messages an hour, then the stream fails.
	chatStream, err := c.Chat(tenant("a"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := grpctest.Chat(chatStream, 5)
	if n != 3 {
		t.Fatalf("%d messages echoed, want 3", n)
	}
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "chat `)
	if len(st.Details()) != 2 || one(t, chatStream.Trailer(), fields.LegacyLimit) != "3" {
		t.Errorf("police denial: details %v trailers %v", st.Details(), chatStream.Trailer())
	}

	// Shape: a second server whose Chat rule shapes.
	rules[0].Name, rules[0].PerMessage = "shaped "+redistest.KeyPrefix(t), engine.MessageLimit{Limit: shape, Shape: true}
	c = serve(t, limiter(t, redisStore(t), interceptor.WithRules(rules[0])), &echo.Server{}, nil)
	chatStream, err = c.Chat(tenant("a"))
	if err != nil {
		t.Fatal(err)
	}
	const messages = 4
	for i := range messages {
		if err := chatStream.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range messages {
		if _, err := chatStream.Recv(); err != nil {
			t.Fatalf("shaped echo %d: %v", i, err)
		}
	}
	_ = chatStream.CloseSend()
	if _, err := chatStream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of shaped chat: %v", err)
	}
}

// Redis down (a server that was stopped): FailOpen admits, FailClosed
// answers Unavailable, each within the store deadline, not Redis's own
// timeouts.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	st := newRedis(t, client)
	srv.Stop(t)

	const deadline, margin = 100 * time.Millisecond, 2 * time.Second
	open := rule(t, tollgate.PerHour(1))
	open.Name, open.FailMode = "open", interceptor.FailOpen
	closed := rule(t, tollgate.PerHour(1))
	closed.Name, closed.FailMode, closed.Methods = "closed", interceptor.FailClosed, []string{echo.CountMethod}
	c := serve(t, limiter(t, st, interceptor.WithRules(open, closed), interceptor.WithStoreTimeout(deadline)), &echo.Server{}, nil)
	for i := range 3 {
		start := time.Now()
		_, _, err := say(tenant("a"), c)
		if elapsed := time.Since(start); elapsed > deadline+margin {
			t.Fatalf("FailOpen call %d took %s, more than the store deadline %s + %s", i, elapsed, deadline, margin)
		}
		if err != nil {
			t.Fatalf("FailOpen call %d: %v", i, err)
		}
		start = time.Now()
		s, err := c.Count(tenant("a"), 1)
		if err == nil {
			_, err = s.Recv()
		}
		if elapsed := time.Since(start); elapsed > deadline+margin {
			t.Fatalf("FailClosed call %d took %s, more than the store deadline %s + %s", i, elapsed, deadline, margin)
		}
		wantCode(t, err, codes.Unavailable, `rate limit "closed": rate limiter unavailable`)
	}
}

// The decision span is a child of otelgrpc's server span.
func TestDecisionSpansAreChildrenOfTheServerSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := rule(t, tollgate.PerHour(1))
	c := serve(t, limiter(t, redisStore(t), interceptor.WithRules(r), func(c *engine.Config) { c.TracerProvider = tp }), &echo.Server{},
		[]grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp)))})
	for range 2 {
		_, _, _ = say(tenant("a"), c)
	}
	servers := map[trace.SpanID]trace.TraceID{}
	for _, s := range sr.Started() {
		if s.Name() == "tollgate.example.Echo/Say" {
			servers[s.SpanContext().SpanID()] = s.SpanContext().TraceID()
		}
	}
	var outcomes []string
	for _, s := range sr.Ended() {
		if s.Name() != "ratelimit "+r.Name {
			continue
		}
		if tid, ok := servers[s.Parent().SpanID()]; !ok || tid != s.SpanContext().TraceID() {
			t.Errorf("span %s has parent %s, not an otelgrpc server span", s.Name(), s.Parent().SpanID())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.AttrOutcome {
				outcomes = append(outcomes, kv.Value.AsString())
			}
		}
	}
	if strings.Join(outcomes, ",") != "allowed,denied" {
		t.Fatalf("decision span outcomes %v, want allowed then denied", outcomes)
	}
}
