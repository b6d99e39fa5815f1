package connectlimit_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// The black-box cases of one engine behind its three doors: real clients
// (grpc-go; connect-go speaking Connect, gRPC and gRPC-Web; net/http) call
// real servers over loopback, on the Memory store, a Redis and a Redis
// Cluster. Each case of the engine's design is a test of its own.

// backends are the stores every case runs on, each apart from the other
// tests sharing its server (a key prefix of its own).
var backends = []struct {
	name  string
	store func(t *testing.T) tollgate.Store
}{
	{"memory", func(t *testing.T) tollgate.Store { return storefixture.Memory(t) }},
	{"redis", func(t *testing.T) tollgate.Store {
		return storefixture.Redis(t, redistest.Single(t).Client(t), store.WithPrefix(redistest.KeyPrefix(t)))
	}},
	{"cluster", func(t *testing.T) tollgate.Store {
		return storefixture.Redis(t, redistest.SharedCluster(t).Client(t), store.WithPrefix(redistest.KeyPrefix(t)))
	}},
}

// eachBackend runs f on every backend.
func eachBackend(t *testing.T, f func(t *testing.T, st tollgate.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.store(t)) })
	}
}

// newEngine is engine.New for a test, closed when it ends.
func newEngine(t *testing.T, st tollgate.Store, c engine.Config) *engine.Limiter {
	t.Helper()
	if c.StoreTimeout == 0 {
		c.StoreTimeout = 10 * time.Second // a loaded machine is not a failing store
	}
	l, err := engine.New(st, c)
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

// answer is what a client got: whether it was admitted, the code of its
// refusal (codes.OK when admitted, an HTTP status mapped to its gRPC code
// otherwise), and the rate-limit fields it carried.
type answer struct {
	admitted   bool
	code       codes.Code
	policy     string // RateLimit-Policy, or the ratelimit-policy metadata
	state      string // RateLimit, or the ratelimit metadata
	retryAfter string
}

// doors serves one engine through every door: Echo's Say over grpc-go
// behind interceptor, over connect-go behind connectlimit, and GET
// /v1/say/{word} over net/http behind httplimit. Each door's call takes a
// header (Go's canonical name) and its value, which the door's client
// sends as that protocol carries it ("-bin" values as bytes: encoded by
// the client as gRPC and Connect encode them, in base64 for HTTP).
type doorSet map[string]func(ctx context.Context, header, value string) answer

func doors(t *testing.T, l *engine.Limiter) doorSet {
	t.Helper()
	gl := interceptor.For(l)
	cc := grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor())})
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
	api.HandleFunc("GET /v1/say/{word}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("word")) })
	mux := http.NewServeMux()
	mux.Handle(echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
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

	set := doorSet{
		"grpc": func(ctx context.Context, header, value string) answer {
			var trailer metadata.MD
			_, err := gc.Say(metadata.AppendToOutgoingContext(ctx, strings.ToLower(header), value), wrapperspb.String("hi"), grpc.Trailer(&trailer))
			return answer{admitted: err == nil, code: status.Code(err), policy: first(trailer.Get("ratelimit-policy")),
				state: first(trailer.Get("ratelimit")), retryAfter: first(trailer.Get("retry-after"))}
		},
		"http": func(ctx context.Context, header, value string) answer {
			req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/say/hi", nil)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(strings.ToLower(header), "-bin") {
				value = base64.StdEncoding.EncodeToString([]byte(value))
			}
			req.Header.Set(header, value)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			a := answer{admitted: resp.StatusCode == http.StatusOK, policy: resp.Header.Get("RateLimit-Policy"),
				state: resp.Header.Get("RateLimit"), retryAfter: resp.Header.Get("Retry-After")}
			a.code = map[int]codes.Code{200: codes.OK, 429: codes.ResourceExhausted, 400: codes.InvalidArgument, 403: codes.PermissionDenied, 503: codes.Unavailable}[resp.StatusCode]
			return a
		},
	}
	for name, opts := range protocols {
		c := connect.NewClient[msg, msg](hc, srv.URL+echo.SayMethod, opts...)
		set["connect-"+name] = func(ctx context.Context, header, value string) answer {
			req := connect.NewRequest(wrapperspb.String("hi"))
			if strings.HasSuffix(strings.ToLower(header), "-bin") {
				value = connect.EncodeBinaryHeader([]byte(value))
			}
			req.Header().Set(header, value)
			resp, err := c.CallUnary(ctx, req)
			if err == nil {
				return answer{admitted: true, policy: resp.Trailer().Get("ratelimit-policy"), state: resp.Trailer().Get("ratelimit")}
			}
			var ce *connect.Error
			if !errors.As(err, &ce) {
				t.Fatalf("%s: %v", name, err)
			}
			return answer{code: codes.Code(ce.Code()), policy: ce.Meta().Get("ratelimit-policy"), state: ce.Meta().Get("ratelimit"), retryAfter: ce.Meta().Get("retry-after")}
		}
	}
	return set
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// 1. A tenant keyed by a "-bin" header has one quota whichever door its
// calls come through: grpc-go decodes the value, and the Connect and HTTP
// doors decode the base64 their clients send in the same way. 10 calls
// through each of the five client protocols, at once, against a limit of
// 25: exactly 25 are admitted.
func TestBinaryHeaderIsOneIdentityOnEveryDoor(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		l := newEngine(t, st, engine.Config{Rules: []engine.Rule{{
			Name: "per-tenant", Key: keyfunc.Metadata("x-tenant-bin"), Limits: engine.Fixed(tollgate.Limit{Rate: 25, Period: time.Hour}),
		}}})
		tenant := "\x00acme\xff" + redistest.KeyPrefix(t)
		var (
			mu       sync.Mutex
			admitted = map[string]int{}
			refused  int
			wg       sync.WaitGroup
		)
		for name, call := range doors(t, l) {
			wg.Go(func() {
				for range 10 {
					a := call(t.Context(), "X-Tenant-Bin", tenant)
					mu.Lock()
					switch {
					case a.admitted:
						admitted[name]++
					case a.code == codes.ResourceExhausted:
						refused++
					default:
						t.Errorf("%s: refused with %s", name, a.code)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		total := 0
		for _, n := range admitted {
			total += n
		}
		if total != 25 || refused != 25 {
			t.Fatalf("admitted %d (%v) and refused %d of 50, want 25 and 25", total, admitted, refused)
		}
	})
}

// 2. A limited ServeMux mounted under another mux is limited by its own
// routes: outer.Handle("/v1/", limit(api)) limits "GET /v1/items/{id}".
func TestNestedMuxDecidesByItsOwnRoutes(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		l := newEngine(t, st, engine.Config{Rules: []engine.Rule{{
			Name: "items", Methods: []string{"GET /v1/items/{id}"}, Key: keyfunc.Metadata("x-tenant"),
			Limits: engine.Fixed(tollgate.Limit{Rate: 2, Period: time.Hour}),
		}}})
		limit, err := httplimit.New(l)
		if err != nil {
			t.Fatal(err)
		}
		api := http.NewServeMux()
		api.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("id")) })
		outer := http.NewServeMux()
		outer.Handle("/v1/", limit(api))
		srv := httptest.NewServer(outer)
		t.Cleanup(srv.Close)
		tenant := redistest.KeyPrefix(t)
		var got []int
		for i := range 3 {
			got = append(got, get(t, srv.Client(), srv.URL+"/v1/items/"+strconv.Itoa(i), tenant))
		}
		if fmt.Sprint(got) != "[200 200 429]" {
			t.Fatalf("statuses %v, want [200 200 429] for a limit of 2", got)
		}
	})
}

// get sends GET url as tenant, following redirects, and returns the
// status.
func get(t *testing.T, c *http.Client, url, tenant string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", tenant)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// 3. A request the mux redirects (a path to clean, a missing trailing
// slash) is charged once, the request the redirect leads to, whether the
// middleware wraps the mux or the route.
func TestRedirectIsNeverCharged(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		rule := engine.Rule{Name: "items", Methods: []string{"GET /v1/items/{id}", "GET /v1/dir/"}, Key: keyfunc.Metadata("x-tenant"),
			Limits: engine.Fixed(tollgate.Limit{Rate: 10, Period: time.Hour})}
		l := newEngine(t, st, engine.Config{Rules: []engine.Rule{rule}})
		limit, err := httplimit.New(l)
		if err != nil {
			t.Fatal(err)
		}
		item := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("id")) }
		dir := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "dir") }
		wrapsMux := http.NewServeMux()
		wrapsMux.HandleFunc("GET /v1/items/{id}", item)
		wrapsMux.HandleFunc("GET /v1/dir/", dir)
		wrapsRoute := http.NewServeMux()
		wrapsRoute.Handle("GET /v1/items/{id}", limit(http.HandlerFunc(item)))
		wrapsRoute.Handle("GET /v1/dir/", limit(http.HandlerFunc(dir)))
		for name, h := range map[string]http.Handler{"wrapping the mux": limit(wrapsMux), "wrapping the route": wrapsRoute} {
			t.Run(name, func(t *testing.T) {
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				tenant := redistest.KeyPrefix(t)
				for _, path := range []string{"/v1//items/1", "/v1/dir"} {
					if s := get(t, srv.Client(), srv.URL+path, tenant); s != http.StatusOK {
						t.Fatalf("%s: %d after the redirect", path, s)
					}
				}
				qs, err := l.Peek(context.Background(), "items", engine.Caller{Value: tenant})
				if err != nil {
					t.Fatal(err)
				}
				if qs[0].Available != 8 {
					t.Fatalf("available %d after two redirected requests, want 8: each charged once", qs[0].Available)
				}
			})
		}
	})
}

// 4. On a denial, a limit that would have admitted reports itself as it
// is, on every door: a call denied by "burst" (2 an hour) reports
// "hourly", 100 an hour of which 2 were taken, with r=98 and the reset of
// those 2 (t at most 72 s), not one call more.
func TestDenialReportsEachLimitsOwnState(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		l := newEngine(t, st, engine.Config{Rules: []engine.Rule{{
			Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(
				tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 2, Period: time.Hour},
				tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 100, Period: time.Hour},
			),
		}}})
		for name, call := range doors(t, l) {
			t.Run(name, func(t *testing.T) {
				tenant := redistest.KeyPrefix(t)
				for range 2 {
					if a := call(t.Context(), "X-Tenant", tenant); !a.admitted {
						t.Fatalf("refused with %s", a.code)
					}
				}
				a := call(t.Context(), "X-Tenant", tenant)
				if a.admitted || a.code != codes.ResourceExhausted {
					t.Fatalf("third call: %+v, want a denial", a)
				}
				items := parseFields(t, a.state)
				burst, hourly := items["per-tenant/1h0m0s/fixed_window"], items["per-tenant/1h0m0s/token_bucket"]
				if burst["r"] != 0 {
					t.Errorf("the denying limit: %v, want r=0 (state %q)", burst, a.state)
				}
				if hourly["r"] != 98 || hourly["t"] < 71 || hourly["t"] > 72 {
					t.Errorf("the limit that would have admitted: %v, want r=98 and t 71 to 72 s (state %q)", hourly, a.state)
				}
			})
		}
	})
}

// parseFields reads a RateLimit field into its items' integer parameters.
func parseFields(t *testing.T, field string) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for _, item := range strings.Split(field, ", ") {
		parts := strings.Split(item, ";")
		name, err := strconv.Unquote(parts[0])
		if err != nil {
			t.Fatalf("item %q of %q: %v", item, field, err)
		}
		params := map[string]int64{}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				params[k] = n
			}
		}
		out[name] = params
	}
	return out
}

// 5. A route no call can ever be named by is refused where the rules are
// built, saying what to write instead: a path without its method, a
// malformed wildcard, a wildcard named twice.
func TestRoutesThatNeverMatchAreConstructionErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		for pattern, want := range map[string]string{
			"/v1/orders":            `write an HTTP route as the method and the ServeMux pattern ("POST /v1/orders", "GET /v1/orders")`,
			"POST /v1/orders/{id":   `route "POST /v1/orders/{id" is not a ServeMux pattern`,
			"GET /v1/{a}/{a}":       `route "GET /v1/{a}/{a}" is not a ServeMux pattern`,
			"post /v1/orders":       "starts with its method in capitals",
			"/v1/orders/{id}/items": "is a path without its HTTP method",
		} {
			rule := engine.Rule{Name: "orders", Methods: []string{pattern}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerSecond(5))}
			_, err := engine.New(st, engine.Config{Rules: []engine.Rule{rule}})
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Methods %q: %v, want an error containing %q", pattern, err, want)
			}
			if _, err := interceptor.New(st, interceptor.WithRules(rule)); err == nil {
				t.Errorf("Methods %q: interceptor.New accepted it", pattern)
			}
		}
		// What the error says to write is accepted, and matches.
		l := newEngine(t, st, engine.Config{Rules: []engine.Rule{{Name: "orders", Methods: []string{"GET /v1/say/{word}"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.Limit{Rate: 1, Period: time.Hour})}}})
		call := doors(t, l)["http"]
		tenant := redistest.KeyPrefix(t)
		if a, b := call(t.Context(), "X-Tenant", tenant), call(t.Context(), "X-Tenant", tenant); !a.admitted || b.code != codes.ResourceExhausted {
			t.Errorf("the route as written: %+v then %+v, want admitted then denied", a, b)
		}
	})
}

// 6. Every door reports every deciding limit with the same names and
// values: the draft's fields over HTTP, the same Structured Field values
// in gRPC and Connect metadata, for a rule with two limits beside a rule
// with an in-flight bound.
func TestEveryDoorSpeaksOneVocabulary(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		l := newEngine(t, st, engine.Config{AdmittedTrailers: true, Rules: []engine.Rule{
			{Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(
				tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 5, Period: time.Hour},
				tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 100, Calendar: tollgate.Day},
			)},
			{Name: "exports", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3},
		}})
		answers := map[string][2]answer{}
		for name, call := range doors(t, l) {
			tenant := redistest.KeyPrefix(t) + name
			var a [2]answer
			for i := range a {
				if a[i] = call(t.Context(), "X-Tenant", tenant); !a[i].admitted {
					t.Fatalf("%s: call %d refused with %s", name, i+1, a[i].code)
				}
				if err := l.Flush(t.Context()); err != nil { // the call's seat is back
					t.Fatal(err)
				}
			}
			answers[name] = a
		}
		ref := answers["http"]
		wantPolicy := `"per-tenant/1h0m0s";q=5;w=3600, "per-tenant/daily";q=100;w=86400, "exports";q=3;qu="concurrent-requests"`
		if ref[1].policy != wantPolicy {
			t.Fatalf("HTTP RateLimit-Policy %q, want %q", ref[1].policy, wantPolicy)
		}
		second := parseFields(t, ref[1].state)
		if second["per-tenant/1h0m0s"]["r"] != 3 || second["per-tenant/daily"]["r"] != 98 || second["exports"]["r"] != 2 {
			t.Fatalf("HTTP RateLimit %q: want 3, 98 and 2 left (the call's own seat taken)", ref[1].state)
		}
		// The same names and values on every door; t is the same but for
		// the seconds that passed between the doors' calls on Redis's clock.
		for name, a := range answers {
			for i := range a {
				got, want := parseFields(t, a[i].state), parseFields(t, ref[i].state)
				same := a[i].policy == ref[i].policy && len(got) == len(want)
				for item, w := range want {
					g := got[item]
					same = same && g["r"] == w["r"] && g["t"] >= w["t"]-2 && g["t"] <= w["t"]+2 &&
						strings.Index(a[i].state, strconv.Quote(item)) == strings.Index(ref[i].state, strconv.Quote(item))
				}
				if !same {
					t.Errorf("%s, call %d: policy %q, state %q; HTTP said %q, %q", name, i+1, a[i].policy, a[i].state, ref[i].policy, ref[i].state)
				}
			}
		}
	})
}

// 7. An in-flight denial suggests a wait from the denied tenant's own
// seats under the rule, never another tenant's: while "slow" holds its
// seat, its denial points at that seat's expiry, however fast "fast"'s
// calls were; once "slow" has held one for 2 s, its denials suggest 2 s.
// The hold lands in the 2 s bucket of tollgate.seat.hold.
func TestInFlightHintIsTheTenantsOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		clk := fakeclock.New(time.Now()) // the engine's: how long a seat is held
		cfg := engine.Config{MeterProvider: mp, Rules: []engine.Rule{{
			Name: "one-at-a-time", Key: keyfunc.Metadata("x-tenant"), InFlight: engine.InFlight{Max: 1, SeatTimeout: time.Minute},
		}}}
		enginetest.Clock(clk)(&cfg)
		l := newEngine(t, st, cfg)
		hl, err := httplimit.New(l)
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{}, 1)
		entered := make(chan struct{}, 1)
		srv := httptest.NewServer(hl(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.Header.Get("X-Tenant"), "slow") {
				entered <- struct{}{}
				<-release
			}
		})))
		t.Cleanup(srv.Close)
		prefix := redistest.KeyPrefix(t)
		do := func(tenant string) *http.Response {
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			req.Header.Set("X-Tenant", prefix+tenant)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return nil
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		for range 20 {
			if r := do("fast"); r == nil || r.StatusCode != http.StatusOK {
				t.Fatal("a fast call was refused")
			}
		}
		if err := l.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		// slow holds its seat; its next call is refused with a hint of the
		// seat's expiry: 60 s, not the fast calls' microseconds.
		held := make(chan *http.Response, 1)
		go func() { held <- do("slow") }()
		<-entered
		denied := do("slow")
		if denied == nil || denied.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("slow's second call: %v, want 429", denied)
		}
		if s, _ := strconv.Atoi(denied.Header.Get("Retry-After")); s < 30 {
			t.Errorf("Retry-After %q while slow holds its seat, want the seat's expiry (60 s), not fast's hold", denied.Header.Get("Retry-After"))
		}
		clk.Advance(2 * time.Second)
		release <- struct{}{}
		if r := <-held; r == nil || r.StatusCode != http.StatusOK {
			t.Fatal("slow's first call failed")
		}
		if err := l.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		// slow held a seat 2 s: while it holds another, its denial says 2.
		go func() { held <- do("slow") }()
		<-entered
		if denied := do("slow"); denied == nil || denied.StatusCode != http.StatusTooManyRequests || denied.Header.Get("Retry-After") != "2" {
			t.Errorf("slow's call after a 2 s hold: %v, Retry-After %q; want 429 and 2", denied, denied.Header.Get("Retry-After"))
		}
		release <- struct{}{}
		<-held
		if err := l.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var hist *metricdata.HistogramDataPoint[float64]
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == telemetry.MetricSeatHold && len(h.DataPoints) == 1 {
					hist = &h.DataPoints[0]
				}
			}
		}
		if hist == nil {
			t.Fatal("no tollgate.seat.hold")
		}
		i := slices.Index(hist.Bounds, 2)
		if i < 1 || hist.Bounds[i-1] != 1 || hist.BucketCounts[i] != 1 {
			t.Errorf("seat.hold bounds %v counts %v: want the 2 s hold alone in (1, 2]", hist.Bounds, hist.BucketCounts)
		}
	})
}

// The peer reaches key functions on every door, though a door hands the
// engine an address it formats only when read: keyfunc.Peer gives grpc-go's
// bufconn address on the gRPC door and the loopback address on the HTTP
// and Connect doors, which share that one identity. A limit of 4 per peer:
// 5 gRPC calls admit 4, and 3 calls through each of the four HTTP and
// Connect clients admit 4 in all.
func TestPeerIsReadOnEveryDoor(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // method → peers its calls had
	peer := keyfunc.Peer()
	key := func(ctx context.Context, call keyfunc.Call) (string, error) {
		v, err := peer(ctx, call)
		mu.Lock()
		defer mu.Unlock()
		if seen[call.Method] == nil {
			seen[call.Method] = map[string]bool{}
		}
		seen[call.Method][v] = true
		return v, err
	}
	l := newEngine(t, storefixture.Memory(t), engine.Config{Rules: []engine.Rule{{
		Name: "per-peer", Key: key, Limits: engine.Fixed(tollgate.Limit{Rate: 4, Period: time.Hour}),
	}}})
	ds := doors(t, l)
	admitted := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(ds)) {
		n := 3
		if name == "grpc" {
			n = 5
		}
		for range n {
			if ds[name](context.Background(), "X-Tenant", "acme").admitted {
				admitted[name]++
			}
		}
	}
	if admitted["grpc"] != 4 {
		t.Errorf("gRPC: %d of 5 calls admitted, want 4", admitted["grpc"])
	}
	if got := admitted["http"] + admitted["connect-connect"] + admitted["connect-grpc"] + admitted["connect-grpcweb"]; got != 4 {
		t.Errorf("HTTP and Connect, one peer: %d of 12 calls admitted (%v), want 4", got, admitted)
	}
	want := map[string]map[string]bool{echo.SayMethod: {"bufconn": true, "127.0.0.1": true}, "GET /v1/say/{word}": {"127.0.0.1": true}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("key functions saw the peers %v, want %v", seen, want)
	}
}
