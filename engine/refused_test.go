package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// refusedRules is one enforcing and one shadow rule, each of one call per
// hour per tenant.
func refusedRules() []engine.Rule {
	return []engine.Rule{
		{Name: "tenant", Methods: []string{"GET /a"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerHour(1))},
		{Name: "trial", Methods: []string{"GET /b"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerHour(1)), Shadow: true},
	}
}

// calls makes n calls of tenant to method on l and returns how many were
// refused.
func calls(t *testing.T, l *engine.Limiter, method, tenant string, n int) int {
	t.Helper()
	refused := 0
	for range n {
		v := l.Begin(context.Background(), engine.Call{Method: method, Header: keyfunc.HTTPHeader(http.Header{"X-Tenant": {tenant}})})
		if v.Err() != nil {
			refused++
			continue
		}
		v.End(nil, nil)
	}
	return refused
}

func newRefusedLimiter(t *testing.T, st tollgate.Store, clk *fakeclock.Clock, c engine.RefusedConfig) *engine.Limiter {
	t.Helper()
	cfg := engine.Config{Rules: refusedRules(), Refused: c}
	enginetest.Clock(clk)(&cfg)
	l, err := engine.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// TopRefused names each refused tenant with its exact count, from many
// goroutines at once, heaviest first; admitted calls are not counted.
func TestTopRefusedCountsEachRefusal(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	st := storefixture.Memory(t, store.WithClock(clk.Now))
	l := newRefusedLimiter(t, st, clk, engine.RefusedConfig{})
	want := map[string]int{"acme": 120, "globex": 60, "initech": 12, "hooli": 1}
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	for tenant, n := range want {
		for g := range 4 {
			wg.Go(func() {
				r := calls(t, l, "GET /a", tenant, n/4+map[bool]int{true: n % 4}[g == 0])
				mu.Lock()
				refused[tenant] += r
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	top, err := l.TopRefused(context.Background(), "tenant", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if top.Shadow || top.Hashed || top.Replicas != 1 {
		t.Errorf("shadow %v, hashed %v, replicas %d; want false, false, 1", top.Shadow, top.Hashed, top.Replicas)
	}
	var got []string
	for _, e := range top.Top {
		got = append(got, fmt.Sprintf("%s=%d", e.ID, e.Count))
		if e.Min != e.Count || e.Max != e.Count {
			t.Errorf("%s: count %d within [%d, %d]; want exact on one replica with few identities", e.ID, e.Count, e.Min, e.Max)
		}
	}
	wantTop := []string{fmt.Sprintf("acme=%d", refused["acme"]), fmt.Sprintf("globex=%d", refused["globex"]), fmt.Sprintf("initech=%d", refused["initech"])}
	if strings.Join(got, " ") != strings.Join(wantTop, " ") {
		t.Errorf("top refused %v, want %v (hooli was admitted once and never refused)", got, wantTop)
	}
	if want := uint64(refused["acme"] + refused["globex"] + refused["initech"]); top.Total != want {
		t.Errorf("total %d, want %d", top.Total, want)
	}
	if n, err := l.TopRefused(context.Background(), "tenant", 1, true); err != nil || len(n.Top) != 1 || n.Top[0].ID != "acme" {
		t.Errorf("TopRefused(limit 1) = %+v, %v; want acme alone", n.Top, err)
	}
}

// A shadow rule's would-be refusals are counted apart, and say so; the
// window forgets refusals once it has passed.
func TestTopRefusedShadowAndWindow(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	st := storefixture.Memory(t, store.WithClock(clk.Now))
	l := newRefusedLimiter(t, st, clk, engine.RefusedConfig{Publish: -1})
	if r := calls(t, l, "GET /b", "acme", 5); r != 0 {
		t.Fatalf("a shadow rule refused %d calls", r)
	}
	top, err := l.TopRefused(context.Background(), "trial", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if !top.Shadow || len(top.Top) != 1 || top.Top[0].ID != "acme" || top.Top[0].Count != 4 {
		t.Errorf("shadow rule: %+v; want acme refused 4 times, marked shadow", top)
	}
	if top, _ := l.TopRefused(context.Background(), "tenant", 0, false); top.Total != 0 {
		t.Errorf("the enforcing rule counted %d refusals of the shadow rule's", top.Total)
	}
	clk.Advance(5 * time.Minute) // past the 2-minute window
	if top, _ := l.TopRefused(context.Background(), "trial", 0, false); top.Total != 0 || len(top.Top) != 0 {
		t.Errorf("after the window: %+v; want nothing", top)
	}
}

// Replicas sharing a store publish their counts; TopRefused on either
// merges both, and local keeps to its own. A hash key shows identities as
// RefusedID.
func TestTopRefusedMergesReplicas(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	st := storefixture.Memory(t, store.WithClock(clk.Now))
	key := []byte("0123456789abcdef")
	c := engine.RefusedConfig{HashKey: key, Publish: 5 * time.Second}
	a, b := newRefusedLimiter(t, st, clk, c), newRefusedLimiter(t, st, clk, c)
	ra := calls(t, a, "GET /a", "acme", 30) // one admitted on the shared store
	rb := calls(t, b, "GET /a", "acme", 20)
	calls(t, b, "GET /a", "globex", 11)
	clk.Advance(5 * time.Second) // both publish
	top, err := a.TopRefused(context.Background(), "tenant", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	acme, globex := engine.RefusedID(key, "acme"), engine.RefusedID(key, "globex")
	if !top.Hashed || top.Replicas != 2 || len(top.Top) != 2 ||
		top.Top[0].ID != acme || top.Top[0].Count != uint64(ra+rb) || top.Top[1].ID != globex || top.Top[1].Count != 10 {
		t.Errorf("merged: %+v; want 2 replicas, %s=%d, %s=10", top, acme, ra+rb, globex)
	}
	local, err := a.TopRefused(context.Background(), "tenant", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if local.Replicas != 1 || len(local.Top) != 1 || local.Top[0].Count != uint64(ra) {
		t.Errorf("local: %+v; want this replica's acme=%d alone", local, ra)
	}
}

// The opt-in log names the heaviest refused identities of each rule.
func TestTopRefusedLog(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	var buf bytes.Buffer
	cfg := engine.Config{Rules: refusedRules(), Refused: engine.RefusedConfig{Log: time.Minute, Publish: -1},
		Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	enginetest.Clock(clk)(&cfg)
	l, err := engine.New(storefixture.Memory(t, store.WithClock(clk.Now)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	calls(t, l, "GET /a", "acme", 4)
	clk.Advance(time.Minute)
	line := buf.String()
	if !strings.Contains(line, "heaviest refused identities") || !strings.Contains(line, "rule=tenant") || !strings.Contains(line, `\"acme\"=3`) {
		t.Errorf("log: %q; want the rule and acme=3", line)
	}
}

// TopRefused's errors: an unknown rule, a limit out of range, counting off;
// bad options are refused by New.
func TestTopRefusedErrors(t *testing.T) {
	st := storefixture.Memory(t)
	l, err := engine.New(st, engine.Config{Rules: refusedRules()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	if _, err := l.TopRefused(ctx, "nope", 0, true); !errors.Is(err, engine.ErrUnknownRule) {
		t.Errorf("unknown rule: %v", err)
	}
	if _, err := l.TopRefused(ctx, "tenant", 101, true); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Errorf("limit 101: %v", err)
	}
	off, err := engine.New(st, engine.Config{Rules: refusedRules(), Refused: engine.RefusedConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close(ctx)
	if _, err := off.TopRefused(ctx, "tenant", 0, true); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("counting off: %v", err)
	}
	for _, c := range []engine.RefusedConfig{{HashKey: []byte("short")}, {Window: time.Second}} {
		if _, err := engine.New(st, engine.Config{Rules: refusedRules(), Refused: c}); err == nil || !strings.Contains(err.Error(), "Refused.") {
			t.Errorf("%+v: %v; want an error naming the setting", c, err)
		}
	}
}
