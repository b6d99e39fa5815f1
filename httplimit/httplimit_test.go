package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// now is the frozen time of the tests' stores: nothing refills, so every
// count is exact.
var now = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func frozen() time.Time { return now }

// server serves mux behind l's middleware over loopback and returns its
// URL.
func server(t *testing.T, l *engine.Limiter, mux http.Handler, opts ...httplimit.Option) string {
	t.Helper()
	mw, err := httplimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(mux))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newLimiter(t *testing.T, st tollgate.Store, rules ...engine.Rule) *engine.Limiter {
	t.Helper()
	l, err := engine.New(st, engine.Config{Rules: rules})
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

// items mux: GET /items/{id} answers "item <id>".
func itemsMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s", r.PathValue("id"))
	})
	return mux
}

// get sends a request of method to url with the headers of kv (name,
// value, …) and returns the response, its body read.
func send(t *testing.T, method, url string, kv ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func tenantRule(limits ...tollgate.Limit) engine.Rule {
	return engine.Rule{Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(limits...)}
}

// fields parses the RateLimit-Policy and RateLimit fields of h by name.
func fields(t *testing.T, h http.Header) (policy, state map[string]sfItem) {
	t.Helper()
	policy, state = map[string]sfItem{}, map[string]sfItem{}
	for field, into := range map[string]map[string]sfItem{"RateLimit-Policy": policy, "RateLimit": state} {
		if n := len(h.Values(field)); n != 1 {
			t.Fatalf("%d %s fields, want 1", n, field)
		}
		items, err := parseList(h.Get(field))
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		for _, it := range items {
			into[it.value] = it
		}
		if len(into) != len(items) {
			t.Fatalf("%s names a policy twice: %q", field, h.Get(field))
		}
	}
	return policy, state
}

// wantParams fails unless it has exactly the integer parameters want.
func wantParams(t *testing.T, what string, it sfItem, want map[string]int64) {
	t.Helper()
	if len(it.params) != len(want) {
		t.Errorf("%s %q: parameters %v, want %v", what, it.value, it.params, want)
	}
	for k, v := range want {
		got, ok := it.param(k)
		if !ok || got != v {
			t.Errorf("%s %q: %s = %v, want %d", what, it.value, k, got, v)
		}
	}
}

// The RateLimit-Policy and RateLimit fields parse as Structured Fields and
// say what the store decided, for every algorithm, for a rule with two
// limits and for an in-flight limit, all on one request: each limit's
// quota and window, its remaining units and its reset, which the same
// requests made to a store of their own give too.
func TestFieldsSayTheStoresDecision(t *testing.T) {
	for _, algo := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		t.Run(algo.String(), func(t *testing.T) {
			perSecond := tollgate.Limit{Algorithm: algo, Rate: 10, Period: time.Second}
			perHour := tollgate.Limit{Algorithm: algo, Rate: 20, Period: time.Hour}
			if algo == tollgate.TokenBucket || algo == tollgate.GCRA {
				perHour.Burst = 5 // a capacity apart from the rate: w is its refill, 15m
			}
			rules := []engine.Rule{
				tenantRule(perSecond, perHour),
				{Name: "global", Key: keyfunc.Constant("all"), Limits: engine.Fixed(tollgate.Limit{Algorithm: algo, Rate: 100, Period: time.Minute})},
				{Name: "exports", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3},
			}
			l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rules...)
			url := server(t, l, itemsMux())
			twin := storefixture.Memory(t, store.WithClock(frozen))
			for i := range 3 {
				if err := l.Flush(context.Background()); err != nil { // the last request's seat is back
					t.Fatal(err)
				}
				resp, body := send(t, "GET", url+"/items/7", "x-tenant", "acme")
				if i == 2 {
					t.Logf("%s: %s\n%s: %s", "RateLimit-Policy", resp.Header.Get("RateLimit-Policy"), "RateLimit", resp.Header.Get("RateLimit"))
				}
				if resp.StatusCode != http.StatusOK || body != "item 7" {
					t.Fatalf("request %d: %s %q", i+1, resp.Status, body)
				}
				policy, state := fields(t, resp.Header)
				for name, limit := range map[string]tollgate.Limit{"per-tenant/1s": perSecond, "per-tenant/1h0m0s": perHour, "global": rules[1].Limits.List()[0]} {
					want, err := twin.Allow(context.Background(), tollgate.Request{Key: name, Limit: limit, Cost: 1})
					if err != nil {
						t.Fatal(err)
					}
					w := limit.Period
					if limit.Burst > 0 {
						w = limit.Period * time.Duration(limit.Burst) / time.Duration(limit.Rate)
					}
					wantParams(t, "policy", policy[name], map[string]int64{"q": limit.Capacity(), "w": int64(w / time.Second)})
					wantParams(t, "state", state[name], map[string]int64{"r": want.Remaining, "t": int64((want.ResetAfter + time.Second - 1) / time.Second)})
				}
				// The in-flight limit: the request held one of 3 seats.
				if q, _ := policy["exports"].param("qu"); q != "concurrent-requests" {
					t.Errorf("in-flight policy %v: qu = %v, want concurrent-requests", policy["exports"], q)
				}
				if q, _ := policy["exports"].param("q"); q != int64(3) {
					t.Errorf("in-flight policy %v: q = %v, want 3", policy["exports"], q)
				}
				if r, _ := state["exports"].param("r"); r != int64(2) {
					t.Errorf("in-flight state %v: r = %v, want 2", state["exports"], r)
				}
			}
		})
	}
}

// A denial is 429 with Retry-After (the exact wait, rounded up), the
// fields, and a problem details body naming the denying policy; nothing
// is debited.
func TestDenial(t *testing.T) {
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), tenantRule(tollgate.PerMinute(2)))
	url := server(t, l, itemsMux())
	for range 2 {
		if resp, _ := send(t, "GET", url+"/items/1", "x-tenant", "a"); resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
	}
	resp, body := send(t, "GET", url+"/items/1", "x-tenant", "a")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("%s, Retry-After %q; want 429 Too Many Requests, 30", resp.Status, resp.Header.Get("Retry-After"))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != httplimit.ProblemQuotaExceeded || p.Status != 429 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "per-tenant" ||
		!strings.Contains(p.Detail, `rate limit "per-tenant" exceeded`) {
		t.Errorf("problem %+v", p)
	}
	_, state := fields(t, resp.Header)
	wantParams(t, "state", state["per-tenant"], map[string]int64{"r": 0, "t": 60})
	if got := available(t, l, "a"); got != 0 {
		t.Errorf("available = %d, want 0", got)
	}
}

// available is what tenant has left under per-tenant.
func available(t *testing.T, l *engine.Limiter, tenant string) int64 {
	t.Helper()
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	qs, err := l.Peek(context.Background(), "per-tenant", engine.Caller{Value: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return qs[0].Available
}

// Bad input gets its documented answer and debits nothing it should not:
// an identity over keyfunc.MaxValueLen and a missing one under
// without ShareMissing are 400; ShareMissing puts the caller in the anonymous
// bucket; a malformed request id is 400; a body the settle function cannot
// read leaves the reservation as it is.
func TestBadInput(t *testing.T) {
	st := storefixture.Memory(t, store.WithClock(frozen))
	shared := engine.Rule{Name: "anonymous", Methods: []string{"GET /shared"}, Key: keyfunc.Metadata("x-tenant"), ShareMissing: true,
		Limits: engine.Fixed(tollgate.PerHour(5))}
	priced := engine.Rule{Name: "tokens", Methods: []string{"POST /complete"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerHour(1000)),
		Cost: 100, Settle: httplimit.SettleBody(func(b []byte) (int64, error) {
			var v struct{ Tokens int64 }
			err := json.Unmarshal(b, &v)
			return v.Tokens, err
		})}
	rejecting := tenantRule(tollgate.PerHour(5))
	rejecting.Methods = []string{"GET /items/{id}"}
	l := newLimiter(t, st, rejecting, shared, priced)
	mux := itemsMux()
	mux.HandleFunc("GET /shared", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /complete", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("x-answer"))
	})
	url := server(t, l, mux, httplimit.WithSettleBody(1024))

	problem := func(resp *http.Response, body string, status int, detail string) {
		t.Helper()
		var p httplimit.Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != status || p.Status != status || !strings.Contains(p.Detail, detail) {
			t.Errorf("%s %q, want %d with %q", resp.Status, body, status, detail)
		}
	}
	resp, body := send(t, "GET", url+"/items/1", "x-tenant", strings.Repeat("x", keyfunc.MaxValueLen+1))
	problem(resp, body, http.StatusBadRequest, "more than 4096")
	resp, body = send(t, "GET", url+"/items/1")
	problem(resp, body, http.StatusBadRequest, "cannot identify the caller")
	if got := available(t, l, "a"); got != 5 {
		t.Errorf("available = %d after refused requests, want 5", got)
	}

	// ShareMissing: every caller without the header spends one bucket.
	for i := range 6 {
		resp, _ := send(t, "GET", url+"/shared")
		if want := map[bool]int{true: 200, false: 429}[i < 5]; resp.StatusCode != want {
			t.Errorf("anonymous request %d: %s, want %d", i+1, resp.Status, want)
		}
	}
	if resp, _ := send(t, "GET", url+"/shared", "x-tenant", "b"); resp.StatusCode != 200 {
		t.Errorf("an identified caller: %s, want 200 (the anonymous bucket is not theirs)", resp.Status)
	}

	tokens := func(tenant string) int64 {
		t.Helper()
		if err := l.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		qs, err := l.Peek(context.Background(), "tokens", engine.Caller{Value: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return qs[0].Available
	}
	resp, body = send(t, "POST", url+"/complete", "x-tenant", "c", "x-request-id", "bad id")
	problem(resp, body, http.StatusBadRequest, "malformed request id")
	if got := tokens("c"); got != 1000 {
		t.Errorf("available = %d after a malformed request id, want 1000", got)
	}
	// A body settle can read: 7 tokens. One it cannot: the reservation of
	// 100 stands, and the response is the handler's.
	if resp, body := send(t, "POST", url+"/complete", "x-tenant", "c", "x-answer", `{"tokens": 7}`); resp.StatusCode != 200 || body != `{"tokens": 7}` {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if got := tokens("c"); got != 993 {
		t.Errorf("available = %d after a settled request of 7, want 993", got)
	}
	if resp, body := send(t, "POST", url+"/complete", "x-tenant", "c", "x-answer", `not json`); resp.StatusCode != 200 || body != "not json" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if got := tokens("c"); got != 893 {
		t.Errorf("available = %d after an unreadable body, want 893: the reservation of 100 stands", got)
	}
}

// A retried POST carrying the request id of an admitted one is admitted
// again without a debit.
func TestRequestIDReplay(t *testing.T) {
	rule := tenantRule(tollgate.PerHour(3))
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	url := server(t, l, mux)
	for range 3 {
		if resp, _ := send(t, "POST", url+"/orders", "x-tenant", "a", "x-request-id", "order-1"); resp.StatusCode != http.StatusCreated {
			t.Fatal(resp.Status)
		}
	}
	if got := available(t, l, "a"); got != 2 {
		t.Errorf("available = %d after one POST sent three times, want 2", got)
	}
}

// Settle reads what the handler wrote: its bytes, its status, or the cost
// it reported with engine.ReportCost.
func TestSettleFromWhatWasWritten(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		io.WriteString(w, strings.Repeat("x", n))
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	mux.HandleFunc("GET /report/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.PathValue("n"), 10, 64)
		engine.ReportCost(r.Context(), n)
	})
	key := keyfunc.Metadata("x-tenant")
	rules := []engine.Rule{
		{Name: "bytes", Methods: []string{"GET /bytes/{n}"}, Key: key, Limits: engine.Fixed(tollgate.PerHour(1000)), Cost: 10, Settle: httplimit.SettleBytes},
		{Name: "logins", Methods: []string{"POST /login"}, Key: key, Limits: engine.Fixed(tollgate.PerHour(5)), Settle: httplimit.SettleStatus(http.StatusUnauthorized)},
		{Name: "reported", Methods: []string{"GET /report/{n}"}, Key: key, Limits: engine.Fixed(tollgate.PerHour(1000)), Cost: 10, Settle: engine.SettleReported},
	}
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rules...)
	url := server(t, l, mux)
	send(t, "GET", url+"/bytes/300", "x-tenant", "a")
	send(t, "POST", url+"/login", "x-tenant", "a", "x-password", "wrong")
	send(t, "POST", url+"/login", "x-tenant", "a", "x-password", "right")
	send(t, "GET", url+"/report/42", "x-tenant", "a")
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for rule, want := range map[string]int64{"bytes": 700, "logins": 4, "reported": 958} {
		qs, err := l.Peek(context.Background(), rule, engine.Caller{Value: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if qs[0].Available != want {
			t.Errorf("%s: available = %d, want %d", rule, qs[0].Available, want)
		}
	}
}

// A streaming response holds its seat until its handler returns: a second
// request of the tenant is refused while the first streams, and admitted
// once it has ended.
func TestSeatHeldWhileStreaming(t *testing.T) {
	rule := engine.Rule{Name: "streams", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 1}
	l := newLimiter(t, storefixture.Memory(t), rule)
	release := make(chan struct{})
	var streaming atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		if streaming.CompareAndSwap(false, true) {
			<-release
		}
		io.WriteString(w, "last\n")
	})
	url := server(t, l, mux)
	req, _ := http.NewRequest("GET", url+"/events", nil)
	req.Header.Set("x-tenant", "a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make([]byte, len("first\n"))
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "first\n" {
		t.Fatalf("read %q, %v: the first event was not flushed through the middleware", line, err)
	}
	if second, body := send(t, "GET", url+"/events", "x-tenant", "a"); second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("while the first streams: %s %q, want 429", second.Status, body)
	}
	close(release)
	if rest, err := io.ReadAll(resp.Body); err != nil || string(rest) != "last\n" {
		t.Fatalf("read %q, %v", rest, err)
	}
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if third, _ := send(t, "GET", url+"/events", "x-tenant", "a"); third.StatusCode != http.StatusOK {
		t.Fatalf("after the first ended: %s, want 200", third.Status)
	}
}

// Rules name HTTP routes by method and ServeMux pattern, and
// keyfunc.Method reads the same: a route's own quota, whatever the path's
// values; another route is not limited by it.
func TestRoutes(t *testing.T) {
	var seen atomic.Value
	rule := engine.Rule{Name: "per-route", Methods: []string{"GET /items/{id}"}, Key: func(ctx context.Context, call keyfunc.Call) (string, error) {
		seen.Store(call.Method)
		return keyfunc.Method()(ctx, call)
	}, Limits: engine.Fixed(tollgate.PerHour(2))}
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), rule)
	mux := itemsMux()
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) {})
	url := server(t, l, mux)
	for i, path := range []string{"/items/1", "/items/2", "/items/3"} {
		resp, _ := send(t, "GET", url+path)
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", path, resp.Status, want)
		}
	}
	if got := seen.Load(); got != "GET /items/{id}" {
		t.Errorf("keyfunc.Method saw %q, want the route", got)
	}
	for range 3 {
		if resp, _ := send(t, "GET", url+"/other"); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Errorf("/other: %s with RateLimit %q, want 200 unlimited", resp.Status, resp.Header.Get("RateLimit"))
		}
	}

	for _, c := range []struct{ pattern, method, want string }{
		{"GET /items/{id}", "GET", "GET /items/{id}"},
		{"GET /items/{id}", "HEAD", "GET /items/{id}"},
		{"/files/", "DELETE", "DELETE /files/"},
		{"example.com/", "GET", "GET example.com/"},
		{"POST  /spaced", "POST", "POST /spaced"},
		{"", "PUT", "PUT"},
	} {
		r := httptest.NewRequest(c.method, "/", nil)
		r.Pattern = c.pattern
		if got, _ := httplimit.Route(r, nil); got != c.want {
			t.Errorf("Route(%s, %q) = %q, want %q", c.method, c.pattern, got, c.want)
		}
	}
}

// WithoutRateLimitFields leaves the fields out; a denial keeps its
// Retry-After.
func TestWithoutRateLimitFields(t *testing.T) {
	l := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), tenantRule(tollgate.PerMinute(1)))
	url := server(t, l, itemsMux(), httplimit.WithoutRateLimitFields())
	for i := range 2 {
		resp, _ := send(t, "GET", url+"/items/1", "x-tenant", "a")
		if resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("RateLimit") != "" {
			t.Errorf("request %d carries the fields: %v", i+1, resp.Header)
		}
		if i == 1 && resp.Header.Get("Retry-After") != "60" {
			t.Errorf("denial: Retry-After %q, want 60", resp.Header.Get("Retry-After"))
		}
	}
	if _, err := httplimit.New(l, httplimit.WithSettleBody(-1)); err == nil {
		t.Error("WithSettleBody(-1) accepted")
	}
	if _, err := httplimit.New(nil); err == nil {
		t.Error("a nil Limiter accepted")
	}
}

// downStore is a Memory store whose decisions fail, as a Redis that does
// not answer.
type downStore struct{ *store.Memory }

func (downStore) Allow(context.Context, tollgate.Request) (tollgate.Decision, error) {
	return tollgate.Decision{}, errors.New("the store is down")
}

func (downStore) AllowAll(context.Context, []tollgate.Request) ([]tollgate.Decision, error) {
	return nil, errors.New("the store is down")
}

// Fail modes, shadow rules and telemetry are the Limiter's, as over gRPC:
// a store that fails refuses a FailClosed route with 503 and admits a
// FailOpen one without fields; a shadow rule's denial refuses nothing; each
// decision is counted in tollgate.decisions.
func TestFailModesShadowAndTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	down := downStore{storefixture.Memory(t)}
	key := keyfunc.Metadata("x-tenant")
	l, err := engine.New(down, engine.Config{MeterProvider: mp, BreakerFailures: -1, BreakerCoolDown: 0, Rules: []engine.Rule{{Name: "closed", Methods: []string{"GET /closed"}, Key: key, Limits: engine.Fixed(tollgate.PerHour(5)), FailMode: engine.FailClosed}, {Name: "open", Methods: []string{"GET /open"}, Key: key, Limits: engine.Fixed(tollgate.PerHour(5))}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /closed", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /open", func(http.ResponseWriter, *http.Request) {})
	url := server(t, l, mux)
	if resp, body := send(t, "GET", url+"/closed", "x-tenant", "a"); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "rate limiter unavailable") {
		t.Errorf("FailClosed: %s %q, want 503", resp.Status, body)
	}
	if resp, _ := send(t, "GET", url+"/open", "x-tenant", "a"); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
		t.Errorf("FailOpen: %s, RateLimit %q; want 200 without fields", resp.Status, resp.Header.Get("RateLimit"))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricDecisions {
				for _, dp := range sum.DataPoints {
					o, _ := dp.Attributes.Value(telemetry.AttrOutcome)
					outcomes[o.AsString()] += dp.Value
				}
			}
		}
	}
	if outcomes["fail_closed"] != 1 || outcomes["fail_open"] != 1 {
		t.Errorf("decisions by outcome %v, want one fail_closed and one fail_open", outcomes)
	}

	shadow := tenantRule(tollgate.PerHour(1))
	shadow.Name, shadow.Shadow = "trial", true
	sl := newLimiter(t, storefixture.Memory(t, store.WithClock(frozen)), tenantRule(tollgate.PerHour(5)), shadow)
	surl := server(t, sl, itemsMux())
	for i := range 2 {
		resp, _ := send(t, "GET", surl+"/items/1", "x-tenant", "a")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s, want 200: a shadow rule refuses nothing", i+1, resp.Status)
		}
		if policy, _ := fields(t, resp.Header); len(policy) != 1 || policy["per-tenant"].value == "" {
			t.Errorf("request %d: policies %v, want the enforcing rule's only", i+1, policy)
		}
	}
}
