package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// TestQuietAdmitted: a door that reports no limits on admitted calls
// (Call.QuietAdmitted) gets none for them, but still gets them for a call
// whose request id replayed (a door says so) and for a refused call; a
// door that reports them gets them for every call.
func TestQuietAdmitted(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	l, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name: "per-tenant", Methods: []string{"JOB /export"}, Key: keyfunc.Metadata("x-tenant"),
		Limits: engine.Fixed(tollgate.PerMinute(2)),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())

	for _, c := range []struct {
		name   string
		header http.Header
		quiet  bool
		limits int // on the call's Verdict
		err    bool
	}{
		{"reported, admitted", http.Header{"X-Tenant": {"a"}}, false, 1, false},
		{"quiet, admitted", http.Header{"X-Tenant": {"b"}}, true, 0, false},
		{"quiet, admitted with a request id", http.Header{"X-Tenant": {"b"}, "X-Request-Id": {"r1"}}, true, 0, false},
		{"quiet, replayed", http.Header{"X-Tenant": {"b"}, "X-Request-Id": {"r1"}}, true, 1, false},
		{"quiet, denied", http.Header{"X-Tenant": {"b"}}, true, 1, true},
	} {
		v := l.Begin(context.Background(), engine.Call{Method: "JOB /export", Header: keyfunc.HTTPHeader(c.header), QuietAdmitted: c.quiet})
		if got := len(v.Limits()); got != c.limits || (v.Err() != nil) != c.err {
			t.Errorf("%s: %d limits, refusal %v; want %d limits, refused %v", c.name, got, v.Err(), c.limits, c.err)
		}
		if c.name == "quiet, replayed" && (len(v.Limits()) == 0 || !v.Limits()[0].Decision.Replayed) {
			t.Errorf("%s: limits %+v, want the replayed decision", c.name, v.Limits())
		}
		v.End(nil, nil)
	}
}
