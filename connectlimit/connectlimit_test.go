package connectlimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var now = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func frozen() time.Time { return now }

type msg = wrapperspb.StringValue

func newLimiter(t *testing.T, st tollgate.Store, rules ...interceptor.Rule) *interceptor.Limiter {
	t.Helper()
	l, err := interceptor.New(st, interceptor.WithRules(rules...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return l
}

// serveConnect serves Echo's Say and Chat over connect-go behind l, over
// loopback with HTTP/1.1 and unencrypted HTTP/2, and returns the server's
// URL and a client for it. say, when not nil, answers Say.
func serveConnect(t *testing.T, l *interceptor.Limiter, say func(context.Context, *msg) (*msg, error)) (string, *http.Client) {
	t.Helper()
	limit, err := connectlimit.New(l.Limiter)
	if err != nil {
		t.Fatal(err)
	}
	if say == nil {
		say = func(_ context.Context, m *msg) (*msg, error) { return m, nil }
	}
	mux := http.NewServeMux()
	mux.Handle(echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		out, err := say(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(out), nil
	}, connect.WithInterceptors(limit)))
	mux.Handle(echo.ChatMethod, connect.NewBidiStreamHandler(echo.ChatMethod, func(ctx context.Context, s *connect.BidiStream[msg, msg]) error {
		for {
			m, err := s.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := s.Send(m); err != nil {
				return err
			}
		}
	}, connect.WithInterceptors(limit)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr}
}

// protocols are the client options of connect-go's three protocols.
var protocols = map[string][]connect.ClientOption{
	"connect": nil,
	"grpc":    {connect.WithGRPC()},
	"grpcweb": {connect.WithGRPCWeb()},
}

func say(ctx context.Context, c *http.Client, url, tenant string, opts ...connect.ClientOption) (*connect.Response[msg], error) {
	req := connect.NewRequest(wrapperspb.String("hi"))
	req.Header().Set("x-tenant", tenant)
	return connect.NewClient[msg, msg](c, url+echo.SayMethod, opts...).CallUnary(ctx, req)
}

func perTenant(limit tollgate.Limit) interceptor.Rule {
	return interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: interceptor.Fixed(limit)}
}

// A denial reaches a Connect, a gRPC and a gRPC-Web client of a connect-go
// handler as it reaches a grpc-go client of a grpc-go server under the
// same rule: ResourceExhausted, the same message, RetryInfo and
// QuotaFailure, and retry-after in the metadata.
func TestDenialIsOneAnswerInEveryProtocol(t *testing.T) {
	ctx := context.Background()
	rule := perTenant(tollgate.PerMinute(2))
	url, c := serveConnect(t, newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule), nil)

	// The reference: grpc-go's client and server.
	gl := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule)
	cc := grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor())})
	gc := echo.NewClient(cc)
	var want error
	var trailer metadata.MD
	for range 3 {
		_, want = gc.Say(metadata.AppendToOutgoingContext(ctx, "x-tenant", "a"), wrapperspb.String("hi"), grpc.Trailer(&trailer))
	}
	wantSt := status.Convert(want)
	if wantSt.Code() != codes.ResourceExhausted {
		t.Fatalf("grpc-go: %v", want)
	}

	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			for i := range 2 {
				if _, err := say(ctx, c, url, name, opts...); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			_, err := say(ctx, c, url, name, opts...)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Message() != wantSt.Message() {
				t.Fatalf("%v, want resource_exhausted: %s", err, wantSt.Message())
			}
			var got []proto.Message
			for _, d := range ce.Details() {
				m, err := d.Value()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, m)
			}
			if len(got) != 2 || !proto.Equal(got[0], wantSt.Details()[0].(proto.Message)) || !proto.Equal(got[1], wantSt.Details()[1].(proto.Message)) {
				t.Errorf("details %v, want %v", got, wantSt.Details())
			}
			if _, ok := got[0].(*errdetails.RetryInfo); !ok {
				t.Errorf("first detail %T, want RetryInfo", got[0])
			}
			for _, k := range []string{fields.RetryAfter, fields.LegacyRemaining, fields.LegacyLimit} {
				if v := ce.Meta().Get(k); v == "" || v != trailer.Get(k)[0] {
					t.Errorf("metadata %s = %q, want %q as grpc-go's trailer", k, v, trailer.Get(k))
				}
			}
		})
	}
}

// A stream opens under the call limits and each message it receives
// passes the PerMessage limit, Police failing the receive.
func TestStreamMessagesLimited(t *testing.T) {
	rule := perTenant(tollgate.PerHour(10))
	rule.PerMessage = engine.MessageLimit{Limit: tollgate.PerHour(2)}
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule)
	url, c := serveConnect(t, l, nil)
	for name, opts := range protocols {
		if name == "grpcweb" {
			continue // gRPC-Web has no client streams
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := connect.NewClient[msg, msg](c, url+echo.ChatMethod, opts...).CallBidiStream(ctx)
			s.RequestHeader().Set("x-tenant", name)
			for i := range 3 {
				if err := s.Send(wrapperspb.String("m")); err != nil {
					t.Fatalf("send %d: %v", i+1, err)
				}
				_, err := s.Receive()
				if i < 2 && err != nil {
					t.Fatalf("message %d: %v", i+1, err)
				}
				if i == 2 && connect.CodeOf(err) != connect.CodeResourceExhausted {
					t.Fatalf("message 3: %v, want resource_exhausted", err)
				}
			}
			_ = s.CloseRequest()
			_ = s.CloseResponse()
		})
	}
}

// Settle sees a handler's connect error as the gRPC status of its code:
// SettleFailures counts failed logins the same way over Connect.
func TestSettleSeesTheHandlersCode(t *testing.T) {
	rule := perTenant(tollgate.PerHour(5))
	rule.Settle = interceptor.SettleFailures(codes.Unauthenticated)
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule)
	url, c := serveConnect(t, l, func(_ context.Context, m *msg) (*msg, error) {
		if m.GetValue() == "hi" {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("wrong password"))
		}
		return m, nil
	})
	ctx := context.Background()
	for range 2 {
		if _, err := say(ctx, c, url, "a"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatal(err)
		}
	}
	req := connect.NewRequest(wrapperspb.String("right"))
	req.Header().Set("x-tenant", "a")
	if _, err := connect.NewClient[msg, msg](c, url+echo.SayMethod).CallUnary(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	qs, err := l.Peek(ctx, "per-tenant", interceptor.Caller{Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if qs[0].Available != 3 {
		t.Errorf("available = %d, want 3: two failures counted, the success given back", qs[0].Available)
	}
}

// A handler that panics, caught by connect-go's WithRecover, ends its call:
// its seat is freed.
func TestPanicFreesTheSeat(t *testing.T) {
	rule := interceptor.Rule{Name: "one", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 1}
	l := newLimiter(t, storefixture.Memory(t), rule)
	limit, err := connectlimit.New(l.Limiter)
	if err != nil {
		t.Fatal(err)
	}
	h := connect.NewUnaryHandler(echo.SayMethod, func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
		panic("the handler fails")
	}, connect.WithInterceptors(limit), connect.WithRecover(func(context.Context, connect.Spec, http.Header, any) error {
		return connect.NewError(connect.CodeInternal, errors.New("recovered"))
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	for i := range 2 {
		if _, err := say(ctx, srv.Client(), srv.URL, "a"); connect.CodeOf(err) != connect.CodeInternal {
			t.Fatalf("call %d: %v, want internal (the seat of the first is free)", i+1, err)
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := connectlimit.New(nil); err == nil {
		t.Error("a nil Limiter accepted")
	}
}

// A retried call carrying the request id of an admitted one is admitted
// again without a debit, in every protocol: the id is the Limiter's
// request id header, as for gRPC and HTTP.
func TestRequestIDReplay(t *testing.T) {
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), perTenant(tollgate.PerHour(5)))
	url, c := serveConnect(t, l, nil)
	ctx := context.Background()
	for name, opts := range protocols {
		for range 3 {
			req := connect.NewRequest(wrapperspb.String("hi"))
			req.Header().Set("x-tenant", name)
			req.Header().Set("x-request-id", "call-"+name)
			if _, err := connect.NewClient[msg, msg](c, url+echo.SayMethod, opts...).CallUnary(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		qs, err := l.Peek(ctx, "per-tenant", interceptor.Caller{Value: name})
		if err != nil {
			t.Fatal(err)
		}
		if qs[0].Available != 4 {
			t.Errorf("%s: available = %d after one call sent three times, want 4", name, qs[0].Available)
		}
	}
}
