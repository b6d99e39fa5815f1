package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// The net/http client side of overload control: the criticality a call
// arrives with goes on with the requests its handler sends through
// httplimit.Transport, and a Throttle keeps a client from sending what the
// server refuses.

// overloadServer serves h behind an engine with overload control o and
// returns the engine and the server's URL.
func overloadServer(t *testing.T, o overload.Options, h http.Handler) (*engine.Limiter, string) {
	t.Helper()
	l, err := engine.New(storefixture.Memory(t), engine.Config{Overload: &o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l, server(t, l, h)
}

func TestTransportSendsTheCallsCriticality(t *testing.T) {
	// Downstream notes the criticality each request arrives with.
	var mu sync.Mutex
	var seen []string
	_, down := overloadServer(t, overload.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get(overload.Header))
		mu.Unlock()
	}))
	client := &http.Client{Transport: httplimit.Transport(nil, nil)}
	get := func(ctx context.Context, header string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", down+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set(overload.Header, header)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if header == "" && req.Header.Get(overload.Header) != "" {
			t.Error("Transport changed the caller's request")
		}
	}
	// Upstream: its handler calls downstream with the context it was
	// given, which carries the criticality its own caller sent.
	_, up := overloadServer(t, overload.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		get(r.Context(), "")
	}))
	req, err := http.NewRequest("GET", up+"/y", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(overload.Header, "sheddable_plus")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get(overload.WithCriticality(t.Context(), overload.CriticalPlus), "")                          // from the context
	get(overload.WithCriticality(t.Context(), overload.CriticalPlus), overload.Sheddable.String()) // the request's own wins
	get(t.Context(), "")                                                                           // none: none sent
	want := []string{"SHEDDABLE_PLUS", "CRITICAL_PLUS", "SHEDDABLE", ""}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("downstream saw %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("downstream saw %q, want %q", seen, want)
		}
	}
}

// A server whose one seat is held sheds every SHEDDABLE request (503); a
// client throttling itself soon stops sending most of them, failing them
// at once with an error wrapping the Refusal, while its CRITICAL_PLUS
// requests (the seat beyond the limit) still go.
func TestTransportThrottlesWhatTheServerRefuses(t *testing.T) {
	l, url := overloadServer(t, overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, ProbeInterval: -1,
		MaxWait: time.Millisecond, Target: time.Millisecond}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	held := l.Begin(t.Context(), engine.Call{Method: "GET /hold", Header: keyfunc.HTTPHeader(nil)})
	if err := held.Err(); err != nil {
		t.Fatal(err)
	}
	defer held.End(nil, nil)
	th, err := overload.NewThrottle(overload.ThrottleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.Transport(nil, th)}
	codes := map[int]int{}
	throttled := 0
	send := func(c overload.Criticality) {
		req, err := http.NewRequestWithContext(overload.WithCriticality(t.Context(), c), "GET", url+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			var r *overload.Refusal
			if !errors.Is(err, overload.ErrShed) || !errors.As(err, &r) || r.Criticality != c {
				t.Fatalf("a refused request: %v, want an error wrapping a %s Refusal", err, c)
			}
			throttled++
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	const n = 200
	for range n {
		send(overload.Sheddable)
	}
	if codes[http.StatusServiceUnavailable]+throttled != n || len(codes) != 1 {
		t.Fatalf("%v sent and %d throttled of %d, want every request shed or throttled", codes, throttled, n)
	}
	if sent := codes[http.StatusServiceUnavailable]; sent > n/4 {
		t.Fatalf("%d of %d always-refused requests were sent, want the throttle to keep most back", sent, n)
	}
	for range 10 {
		send(overload.CriticalPlus)
	}
	if codes[http.StatusOK] != 10 {
		t.Fatalf("CRITICAL_PLUS: %d of 10 served, want all: the throttle is per criticality and the server keeps it a seat", codes[http.StatusOK])
	}
}
