package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/grpctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := idempotency.NewID()
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("NewID() = %q, want 32 hex digits", id)
		}
		if err := check.RequestID(id); err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("NewID repeated %q", id)
		}
		seen[id] = true
	}
}

// flaky is an Echo server that fails the first attempt of every request id
// with UNAVAILABLE and records every attempt it sees.
type flaky struct {
	mu       sync.Mutex
	attempts []attempt
	perID    map[string]int
}

type attempt struct {
	method, id, previous string // previous: grpc-previous-rpc-attempts, set by gRPC's retry
}

func newFlaky() *flaky { return &flaky{perID: map[string]int{}} }

func (f *flaky) before(ctx context.Context, fullMethod string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	id := strings.Join(md.Get(idempotency.DefaultHeader), ",")
	prev := strings.Join(md.Get("grpc-previous-rpc-attempts"), ",")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, attempt{fullMethod, id, prev})
	f.perID[id]++
	if f.perID[id] == 1 {
		return status.Error(codes.Unavailable, "first attempt fails")
	}
	return nil
}

func (f *flaky) seen() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]attempt(nil), f.attempts...)
}

func (f *flaky) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = nil
}

// serve runs an Echo server with the given hook on an in-memory listener and
// returns a client dialled with opts.
func serve(t *testing.T, before func(context.Context, string) error, opts ...grpc.DialOption) *echo.Client {
	t.Helper()
	register := func(s *grpc.Server) { echo.Register(s, &echo.Server{Before: before}) }
	return echo.NewClient(grpctest.Serve(t, register, nil, opts...))
}

// retryPolicy is a service config that makes gRPC retry UNAVAILABLE on
// every Echo method, quickly.
const retryPolicy = `{"methodConfig": [{
	"name": [{"service": "tollgate.example.Echo"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.01s",
		"backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]
	}
}]}`

func say(t *testing.T, ctx context.Context, c *echo.Client) {
	t.Helper()
	out, err := c.Say(ctx, wrapperspb.String("hi"))
	if err != nil {
		t.Fatalf("Say: %v", err)
	}
	if out.GetValue() != "hi" {
		t.Fatalf("Say answered %q", out.GetValue())
	}
}

func count(t *testing.T, ctx context.Context, c *echo.Client, n int) {
	t.Helper()
	stream, err := c.Count(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Count: %v", err)
		}
		got++
	}
	if got != n {
		t.Fatalf("Count(%d) received %d", n, got)
	}
}

// checkRetried asserts that attempts are two attempts of one logical call,
// on method, with one valid id, and returns that id.
func checkRetried(t *testing.T, attempts []attempt, method string) string {
	t.Helper()
	if len(attempts) != 2 {
		t.Fatalf("server saw %d attempts %+v, want 2", len(attempts), attempts)
	}
	a, b := attempts[0], attempts[1]
	if a.method != method || b.method != method {
		t.Fatalf("attempts on %q and %q, want %q", a.method, b.method, method)
	}
	if a.id == "" || check.RequestID(a.id) != nil {
		t.Fatalf("first attempt carried id %q", a.id)
	}
	if a.id != b.id {
		t.Fatalf("the retry carried id %q, the first attempt %q: want the same", b.id, a.id)
	}
	return a.id
}

// TestServiceConfigRetryKeepsID proves that with gRPC's built-in retry
// policy every attempt of a call carries the id our interceptor stamped, and
// that the next logical call gets a new one.
func TestServiceConfigRetryKeepsID(t *testing.T) {
	f := newFlaky()
	c := serve(t, f.before,
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithUnaryInterceptor(idempotency.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(idempotency.StreamClientInterceptor()),
	)
	ids := map[string]bool{}
	for _, call := range []struct {
		method string
		run    func()
	}{
		{echo.SayMethod, func() { say(t, t.Context(), c) }},
		{echo.SayMethod, func() { say(t, t.Context(), c) }},
		{echo.CountMethod, func() { count(t, t.Context(), c, 3) }},
		{echo.CountMethod, func() { count(t, t.Context(), c, 3) }},
	} {
		f.reset()
		call.run()
		attempts := f.seen()
		id := checkRetried(t, attempts, call.method)
		// The second attempt is gRPC's retry of the same logical call.
		if attempts[0].previous != "" || attempts[1].previous != "1" {
			t.Fatalf("grpc-previous-rpc-attempts %q then %q, want \"\" then \"1\"", attempts[0].previous, attempts[1].previous)
		}
		if ids[id] {
			t.Fatalf("id %q reused by a new logical call", id)
		}
		ids[id] = true
	}
}

// TestMiddlewareRetryOrder proves the documented order with
// go-grpc-middleware's retry interceptor: chained after ours, its attempts
// share the id; chained before ours, every attempt gets a fresh id (and would
// be debited again), which is why the order matters.
func TestMiddlewareRetryOrder(t *testing.T) {
	retryOpts := []retry.CallOption{
		retry.WithCodes(codes.Unavailable),
		retry.WithMax(3),
		retry.WithBackoff(retry.BackoffLinear(time.Millisecond)),
	}
	t.Run("ours first", func(t *testing.T) {
		f := newFlaky()
		c := serve(t, f.before,
			grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor(), retry.UnaryClientInterceptor(retryOpts...)),
			grpc.WithChainStreamInterceptor(idempotency.StreamClientInterceptor(), retry.StreamClientInterceptor(retryOpts...)),
		)
		say(t, t.Context(), c)
		first := checkRetried(t, f.seen(), echo.SayMethod)
		f.reset()
		say(t, t.Context(), c)
		if second := checkRetried(t, f.seen(), echo.SayMethod); second == first {
			t.Fatalf("two logical calls shared id %q", first)
		}
		f.reset()
		count(t, t.Context(), c, 4)
		checkRetried(t, f.seen(), echo.CountMethod)
	})
	t.Run("retry first (wrong)", func(t *testing.T) {
		f := newFlaky()
		c := serve(t, f.before,
			grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(retryOpts...), idempotency.UnaryClientInterceptor()),
		)
		// Every attempt arrives as a new call with a new id, so the server
		// (which fails the first attempt of each id) never sees a retry.
		_, err := c.Say(t.Context(), wrapperspb.String("hi"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Say: %v, want Unavailable after every attempt failed", err)
		}
		attempts := f.seen()
		ids := map[string]bool{}
		for _, a := range attempts {
			ids[a.id] = true
		}
		if len(attempts) != 3 || len(ids) != 3 {
			t.Fatalf("attempts %+v: with the retry outermost each of the 3 attempts should carry its own id", attempts)
		}
	})
}

// TestCallerIDKept proves an id the caller set is sent unchanged on every
// attempt, and that WithHeader and WithGenerator are honoured.
func TestCallerIDKept(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	c := serve(t, func(ctx context.Context, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("idempotency-key=%q x-request-id=%q", md.Get("idempotency-key"), md.Get(idempotency.DefaultHeader)))
		return nil
	},
		grpc.WithUnaryInterceptor(idempotency.UnaryClientInterceptor(
			idempotency.WithHeader("Idempotency-Key"),
			idempotency.WithGenerator(func() string { return "generated" }),
		)),
	)
	say(t, metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "mine"), c)
	say(t, t.Context(), c)
	mu.Lock()
	defer mu.Unlock()
	want := []string{`idempotency-key=["mine"] x-request-id=[]`, `idempotency-key=["generated"] x-request-id=[]`}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("server saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestBadGenerator proves a generator that returns an unusable id fails the
// call on the client, before anything reaches the server.
func TestBadGenerator(t *testing.T) {
	for _, bad := range []string{"", "has space", strings.Repeat("x", tollgate.MaxRequestIDLen+1)} {
		var reached bool
		c := serve(t, func(context.Context, string) error { reached = true; return nil },
			grpc.WithUnaryInterceptor(idempotency.UnaryClientInterceptor(idempotency.WithGenerator(func() string { return bad }))),
			grpc.WithStreamInterceptor(idempotency.StreamClientInterceptor(idempotency.WithGenerator(func() string { return bad }))),
		)
		if _, err := c.Say(t.Context(), wrapperspb.String("x")); status.Code(err) != codes.Internal {
			t.Fatalf("generator %.10q: Say: %v, want Internal", bad, err)
		}
		if _, err := c.Count(t.Context(), 1); status.Code(err) != codes.Internal {
			t.Fatalf("generator %.10q: Count: %v, want Internal", bad, err)
		}
		if reached {
			t.Fatalf("generator %.10q: the call reached the server", bad)
		}
	}
}

// TestConcurrentCallsGetDistinctIDs drives many goroutines through one
// connection with gRPC retries: every logical call is seen exactly twice
// (the failed attempt and its retry), under one id of its own.
func TestConcurrentCallsGetDistinctIDs(t *testing.T) {
	const workers, perWorker = 32, 20
	f := newFlaky()
	c := serve(t, f.before,
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithUnaryInterceptor(idempotency.UnaryClientInterceptor()),
	)
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				if _, err := c.Say(t.Context(), wrapperspb.String("x")); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.perID) != workers*perWorker {
		t.Fatalf("%d distinct ids, want %d", len(f.perID), workers*perWorker)
	}
	for id, n := range f.perID {
		if n != 2 {
			t.Fatalf("id %q seen %d times, want 2", id, n)
		}
	}
}
