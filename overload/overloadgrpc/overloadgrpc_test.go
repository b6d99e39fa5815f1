package overloadgrpc_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/overload/overloadgrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate is a handler that holds its seat until released.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) before(ctx context.Context, _ string) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func say(ctx context.Context, c *echo.Client, crit overload.Criticality, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, overload.Header, crit.String())
	_, err := c.Say(ctx, wrapperspb.String("x"), opts...)
	return err
}

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("refusal %v, want Unavailable", err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("refusal %v carries no RetryInfo", err)
	return 0
}

// serve runs echo behind opts with g as its handler's body.
func serve(t *testing.T, g *gate, opts []grpc.ServerOption, dial ...grpc.DialOption) *echo.Client {
	return echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{Before: g.before}) }, opts, dial...))
}

// TestTapRefusesBeforeTheStream: with the seat taken and the room full of
// a more critical call, a Sheddable call is refused in the tap handle
// (counted by Check), with Unavailable and a RetryInfo; a CriticalPlus
// call is not.
func TestTapRefusesBeforeTheStream(t *testing.T) {
	l, err := overload.New(overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, MaxQueue: 1, ProbeInterval: -1, MaxWait: time.Minute, Target: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	c := serve(t, g, overloadgrpc.NewServer(l, nil).Options())
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- say(t.Context(), c, overload.Critical) })
	<-g.entered // the first holds the seat
	wg.Go(func() { errs <- say(t.Context(), c, overload.Critical) })
	for l.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	err = say(t.Context(), c, overload.Sheddable)
	if d := retryDelay(t, err); d <= 0 {
		t.Fatalf("RetryDelay %s, want > 0", d)
	}
	if st := l.Stats(); st.ShedByCheck != 1 {
		t.Fatalf("stats %+v, want the Sheddable call refused by Check", st)
	}
	wg.Go(func() { errs <- say(t.Context(), c, overload.CriticalPlus) }) // its own seat
	<-g.entered
	close(g.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestInterceptorRefusalSetsPushback: without the tap, the interceptor
// refuses the call and sets grpc-retry-pushback-ms to the RetryInfo delay.
func TestInterceptorRefusalSetsPushback(t *testing.T) {
	l, err := overload.New(overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, MaxQueue: 1, ProbeInterval: -1, MaxWait: time.Minute, Target: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	s := overloadgrpc.NewServer(l, overloadgrpc.TenantHeader("x-tenant"))
	c := serve(t, g, []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor())})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(g.release)
	wg.Go(func() { _ = say(t.Context(), c, overload.Critical) })
	<-g.entered
	wg.Go(func() { _ = say(t.Context(), c, overload.Critical) })
	for l.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	var trailer metadata.MD
	err = say(t.Context(), c, overload.Sheddable, grpc.Trailer(&trailer))
	d := retryDelay(t, err)
	v := trailer.Get("grpc-retry-pushback-ms")
	if len(v) != 1 || v[0] != strconv.FormatInt(d.Milliseconds(), 10) {
		t.Fatalf("grpc-retry-pushback-ms %v, want %d", v, d.Milliseconds())
	}
	if st := l.Stats(); st.ShedByCheck != 0 || st.Shed[overload.Sheddable].WithinShare != 1 {
		t.Fatalf("stats %+v, want one Sheddable call shed by the interceptor", st)
	}
}

// TestCriticalityTravels: a client's criticality reaches the server, whose
// handler's outgoing calls carry it on through the client interceptor.
func TestCriticalityTravels(t *testing.T) {
	seen := make(chan string, 1)
	backend := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) {
		echo.Register(s, &echo.Server{Before: func(ctx context.Context, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			seen <- md.Get(overload.Header)[0]
			return nil
		}})
	}, nil, grpc.WithUnaryInterceptor(overloadgrpc.UnaryClientInterceptor())))
	l, err := overload.New(overload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	front := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) {
		echo.Register(s, &echo.Server{Before: func(ctx context.Context, _ string) error {
			if c, ok := overload.CriticalityFrom(ctx); !ok || c != overload.SheddablePlus {
				return status.Errorf(codes.Internal, "handler's context carries %v %v", c, ok)
			}
			_, err := backend.Say(ctx, wrapperspb.String("on"))
			return err
		}})
	}, overloadgrpc.NewServer(l, nil).Options(), grpc.WithUnaryInterceptor(overloadgrpc.UnaryClientInterceptor())))
	ctx := overload.WithCriticality(t.Context(), overload.SheddablePlus)
	if _, err := front.Say(ctx, wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "SHEDDABLE_PLUS" {
		t.Fatalf("the backend saw %q, want SHEDDABLE_PLUS", got)
	}
	if st := l.Stats(); st.Admitted[overload.SheddablePlus] != 1 {
		t.Fatalf("admitted %v, want one SheddablePlus call", st.Admitted)
	}
}

// TestThrottleKeepsRefusedCallsAtTheClient: against a server that refuses
// every call, a throttled client sends only a fraction of its calls; the
// rest fail at once with Unavailable and a RetryInfo.
func TestThrottleKeepsRefusedCallsAtTheClient(t *testing.T) {
	var mu sync.Mutex
	reached := 0
	refuse := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		mu.Lock()
		reached++
		mu.Unlock()
		return nil, status.Error(codes.Unavailable, "overloaded")
	}
	th, err := overload.NewThrottle(overload.ThrottleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(refuse)},
		grpc.WithUnaryInterceptor(overloadgrpc.UnaryClientInterceptor(overloadgrpc.WithThrottle(th)))))
	const n = 400
	throttled := 0
	for range n {
		err := say(t.Context(), c, overload.Sheddable)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want Unavailable", err)
		}
		if status.Convert(err).Message() != "overloaded" {
			retryDelay(t, err)
			throttled++
		}
	}
	if reached+throttled != n || reached > n/4 {
		t.Fatalf("%d calls reached the server, %d throttled, of %d: want most kept at the client", reached, throttled, n)
	}
}

func TestTenantHeader(t *testing.T) {
	f := overloadgrpc.TenantHeader("x-tenant")
	if got := f(metadata.Pairs("x-tenant", "a", "x-tenant", "b")); got != "a" {
		t.Fatalf("got %q, want the first value", got)
	}
	if got := f(metadata.MD{}); got != "" {
		t.Fatalf("got %q, want \"\"", got)
	}
}
