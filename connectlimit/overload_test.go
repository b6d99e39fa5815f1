package connectlimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// Overload control through the three doors of one engine: real clients
// (grpc-go; connect-go speaking Connect, gRPC and gRPC-Web; net/http) call
// real servers whose handlers run hook with the context they were given.

// shedAnswer is what a client got from a door under overload control.
type shedAnswer struct {
	code codes.Code // codes.OK when admitted; an HTTP status as its gRPC code
	// retryInfo is the RetryInfo detail's delay (gRPC and Connect), 0 when
	// absent; retryAfter the retry-after field or header, and pushback
	// grpc-retry-pushback-ms (gRPC and Connect).
	retryInfo            time.Duration
	retryAfter, pushback string
}

// overloadDoors serves l through every door; each handler runs hook with
// its context. Each door's call sends criticality in overload.Header ("":
// none).
func overloadDoors(t *testing.T, l *engine.Limiter, hook func(ctx context.Context)) map[string]func(ctx context.Context, criticality string) shedAnswer {
	t.Helper()
	gl := interceptor.For(l)
	cc := grpctest.Serve(t, func(s *grpc.Server) {
		echo.Register(s, &echo.Server{Before: func(ctx context.Context, _ string) error { hook(ctx); return nil }})
	}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor())})
	gc := echo.NewClient(cc)
	ci, err := connectlimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := httplimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /v1/say/{word}", func(w http.ResponseWriter, r *http.Request) {
		hook(r.Context())
		_, _ = io.WriteString(w, r.PathValue("word"))
	})
	mux := http.NewServeMux()
	mux.Handle(echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		hook(ctx)
		return connect.NewResponse(req.Msg), nil
	}, connect.WithInterceptors(ci)))
	mux.Handle("/v1/", hl(api))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.Protocols.SetHTTP1(true)
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}

	set := map[string]func(ctx context.Context, criticality string) shedAnswer{
		"grpc": func(ctx context.Context, c string) shedAnswer {
			if c != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, overload.Header, c)
			}
			var trailer metadata.MD
			_, err := gc.Say(ctx, wrapperspb.String("hi"), grpc.Trailer(&trailer))
			st := status.Convert(err)
			return shedAnswer{code: st.Code(), retryInfo: retryInfo(st.Details()),
				retryAfter: first(trailer.Get("retry-after")), pushback: first(trailer.Get("grpc-retry-pushback-ms"))}
		},
		"http": func(ctx context.Context, c string) shedAnswer {
			req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/say/hi", nil)
			if err != nil {
				t.Fatal(err)
			}
			if c != "" {
				req.Header.Set(overload.Header, c)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code, ok := map[int]codes.Code{200: codes.OK, 503: codes.Unavailable, 429: codes.ResourceExhausted}[resp.StatusCode]
			if !ok {
				code = codes.Unknown
			}
			return shedAnswer{code: code, retryAfter: resp.Header.Get("Retry-After")}
		},
	}
	for name, opts := range protocols {
		c := connect.NewClient[msg, msg](hc, srv.URL+echo.SayMethod, opts...)
		set["connect-"+name] = func(ctx context.Context, crit string) shedAnswer {
			req := connect.NewRequest(wrapperspb.String("hi"))
			if crit != "" {
				req.Header().Set(overload.Header, crit)
			}
			_, err := c.CallUnary(ctx, req)
			if err == nil {
				return shedAnswer{code: codes.OK}
			}
			var ce *connect.Error
			if !errors.As(err, &ce) {
				t.Fatalf("%s: %v", name, err)
			}
			var details []any
			for _, d := range ce.Details() {
				if v, err := d.Value(); err == nil {
					details = append(details, v)
				}
			}
			return shedAnswer{code: codes.Code(ce.Code()), retryInfo: retryInfo(details),
				retryAfter: ce.Meta().Get("retry-after"), pushback: ce.Meta().Get("grpc-retry-pushback-ms")}
		}
	}
	return set
}

// retryInfo is the delay of the RetryInfo among details, or 0.
func retryInfo[D any](details []D) time.Duration {
	for _, d := range details {
		if ri, ok := any(d).(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// holdSeats has the engine admit n calls that hold their seats until the
// test ends, as handlers still running would.
func holdSeats(t *testing.T, ctx context.Context, l *engine.Limiter, n int) {
	for range n {
		v := l.Begin(ctx, engine.Call{Method: "/hold.Service/Hold", Header: keyfunc.HTTPHeader(nil)})
		if err := v.Err(); err != nil {
			t.Fatalf("holding a seat: %v", err)
		}
		t.Cleanup(func() { v.End(nil, nil) })
	}
}

// A call overload control sheds is refused before any rule is asked, as
// each door says "the server is short, come back after this": gRPC and
// Connect Unavailable with RetryInfo, retry-after and
// grpc-retry-pushback-ms; HTTP 503 with Retry-After. The hint is the
// criticality's, jittered within ±50%.
func TestShedCallIsRefusedAlikeOnEveryDoor(t *testing.T) {
	st := storefixture.Memory(t)
	reader := sdkmetric.NewManualReader()
	l := newEngine(t, st, engine.Config{
		// A rule that would refuse every call: a shed call never reaches it.
		Rules: []engine.Rule{{Name: "none-left", Key: keyfunc.Constant("all"), Limits: engine.Fixed(tollgate.Limit{Rate: 1, Period: time.Hour})}},
		Overload: &overload.Options{
			MinLimit: 1, MaxLimit: 1, InitialLimit: 1, ProbeInterval: -1,
			MaxWait: time.Millisecond, Target: time.Millisecond, RetryAfter: 100 * time.Millisecond,
		},
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	holdSeats(t, t.Context(), l, 1) // the one seat: every other call waits a millisecond, then is shed
	calls := 0
	for name, call := range overloadDoors(t, l, func(context.Context) { t.Error("a shed call reached its handler") }) {
		a := call(t.Context(), "SHEDDABLE")
		calls++
		if a.code != codes.Unavailable {
			t.Errorf("%s: %s, want Unavailable (503)", name, a.code)
			continue
		}
		// SHEDDABLE: 4 × 100ms, spread over [0.5, 1.5).
		if name != "http" {
			if a.retryInfo < 200*time.Millisecond || a.retryInfo >= 600*time.Millisecond {
				t.Errorf("%s: RetryInfo %s, want in [200ms, 600ms)", name, a.retryInfo)
			}
			if ms, err := strconv.Atoi(a.pushback); err != nil || time.Duration(ms)*time.Millisecond < a.retryInfo || time.Duration(ms-1)*time.Millisecond > a.retryInfo {
				t.Errorf("%s: grpc-retry-pushback-ms %q, want RetryInfo's %s in ms", name, a.pushback, a.retryInfo)
			}
		}
		if a.retryAfter != "1" {
			t.Errorf("%s: retry-after %q, want 1 (seconds, rounded up)", name, a.retryAfter)
		}
	}
	// Every call was a SHEDDABLE one that waited its millisecond.
	shed := shedCount(t, reader)
	if n := shed["SHEDDABLE queue_timeout within"] + shed["SHEDDABLE queue_timeout over"]; n != int64(calls) || n != sumOf(shed) {
		t.Fatalf("%s = %v, want %d SHEDDABLE queue_timeout", telemetry.MetricOverloadShed, shed, calls)
	}
}

func sumOf(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// shedCount is the shed counter by criticality, reason and tenant share,
// space-separated.
func shedCount(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	return shedBy(t, reader, telemetry.AttrCriticality, telemetry.AttrOverloadReason, telemetry.AttrTenantShare)
}

// shedBy is the shed counter by the values of keys, space-separated (""
// for a key a point does not have).
func shedBy(t *testing.T, reader *sdkmetric.ManualReader, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricOverloadShed {
				for _, p := range s.DataPoints {
					vs := make([]string, len(keys))
					for i, k := range keys {
						v, _ := p.Attributes.Value(k)
						vs[i] = v.Emit()
					}
					n[strings.Join(vs, " ")] += p.Value
				}
			}
		}
	}
	return n
}

// A client on every door at once, five in all, against a limit of two seats: never
// more than two handlers run at once, every call is admitted (each waits
// its turn within MaxWait), and every seat is given back.
func TestEveryDoorSharesOneConcurrencyLimit(t *testing.T) {
	st := storefixture.Memory(t)
	l := newEngine(t, st, engine.Config{Overload: &overload.Options{
		MinLimit: 2, MaxLimit: 2, InitialLimit: 2, ProbeInterval: -1, MaxWait: time.Minute, Target: time.Minute,
	}})
	const perDoor = 20
	answers, doorCount, most := callEveryDoorAtOnce(t, l, "SHEDDABLE_PLUS", perDoor)
	if answers[codes.OK] != doorCount*perDoor || len(answers) != 1 {
		t.Fatalf("answers %v, want all %d admitted", answers, doorCount*perDoor)
	}
	if most > 2 {
		t.Fatalf("%d handlers ran at once under a limit of 2", most)
	}
	// Every seat was given back: two more calls take both at once (a seat
	// not given back would keep one of them waiting past its deadline),
	// and a third waits until its caller gives up.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	holdSeats(t, ctx, l, 2)
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if v := l.Begin(ctx, engine.Call{Method: "/hold.Service/Hold", Header: keyfunc.HTTPHeader(nil)}); v.Kind() != engine.Canceled {
		t.Fatalf("a third call with both seats held: %v, want it to wait until its caller gives up", v.Err())
	}
}

// The criticality a call arrives with is in its handler's context on
// every door, and goes on with the calls the handler makes: through
// interceptor.UnaryClientInterceptor (gRPC) and connectlimit's interceptor
// on a Connect client. A call without one is Critical.
func TestCriticalityTravelsThroughEveryDoor(t *testing.T) {
	st := storefixture.Memory(t)
	// Downstream: a gRPC and a Connect server that note what arrives.
	var mu sync.Mutex
	downstream := map[string][]string{}
	note := func(door string, vs []string) {
		mu.Lock()
		downstream[door] = append(downstream[door], vs...)
		mu.Unlock()
	}
	down := grpctest.Serve(t, func(s *grpc.Server) {
		echo.Register(s, &echo.Server{Before: func(ctx context.Context, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			note("grpc", md.Get(overload.Header))
			return nil
		}})
	}, nil, grpc.WithUnaryInterceptor(interceptor.UnaryClientInterceptor(nil)))
	downGRPC := echo.NewClient(down)
	downMux := http.NewServeMux()
	downMux.Handle(echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		note("connect", req.Header().Values(overload.Header))
		return connect.NewResponse(req.Msg), nil
	}))
	downSrv := httptest.NewServer(downMux)
	t.Cleanup(downSrv.Close)
	l := newEngine(t, st, engine.Config{Overload: &overload.Options{}})
	ci, err := connectlimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	downConnect := connect.NewClient[msg, msg](downSrv.Client(), downSrv.URL+echo.SayMethod, connect.WithInterceptors(ci))

	var seen []string
	hook := func(ctx context.Context) {
		c, ok := overload.CriticalityFrom(ctx)
		if !ok {
			t.Error("a handler's context carries no criticality")
		}
		mu.Lock()
		seen = append(seen, c.String())
		mu.Unlock()
		if _, err := downGRPC.Say(ctx, wrapperspb.String("on")); err != nil {
			t.Error(err)
		}
		if _, err := downConnect.CallUnary(ctx, connect.NewRequest(wrapperspb.String("on"))); err != nil {
			t.Error(err)
		}
	}
	doors := overloadDoors(t, l, hook)
	for name, call := range doors {
		for _, c := range []string{"sheddable", ""} {
			if a := call(t.Context(), c); a.code != codes.OK {
				t.Fatalf("%s with %q: %s", name, c, a.code)
			}
		}
	}
	want := map[string]int{"SHEDDABLE": len(doors), "CRITICAL": len(doors)}
	got := map[string]int{}
	for _, c := range seen {
		got[c]++
	}
	for _, door := range []string{"grpc", "connect"} {
		for _, c := range downstream[door] {
			got[door+" "+c]++
		}
		want[door+" SHEDDABLE"], want[door+" CRITICAL"] = len(doors), len(doors)
	}
	if len(got) != len(want) {
		t.Fatalf("criticalities seen %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("criticalities seen %v, want %v", got, want)
		}
	}
}

// callEveryDoorAtOnce has one client on each door of l make perDoor calls
// of criticality, all doors at once, each handler running a millisecond;
// it returns the answers, the doors, and the most handlers that ran at
// once.
func callEveryDoorAtOnce(t *testing.T, l *engine.Limiter, criticality string, perDoor int) (map[codes.Code]int, int, int64) {
	t.Helper()
	var running, most atomic.Int64
	hook := func(context.Context) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // long enough for the others to pile up
		running.Add(-1)
	}
	var (
		mu      sync.Mutex
		answers = map[codes.Code]int{}
		wg      sync.WaitGroup
	)
	doors := 0
	for _, call := range overloadDoors(t, l, hook) {
		doors++
		wg.Go(func() {
			for range perDoor {
				a := call(t.Context(), criticality)
				mu.Lock()
				answers[a.code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return answers, doors, most.Load()
}
