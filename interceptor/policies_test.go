package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// Two limits on one identity: a denial names every limit that denies, waits
// for the longest, and its trailers describe that limit; an admission's
// trailers describe the limit with the fewest units left.
func TestMultiLimitDenialAndTrailers(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.Limit{Rate: 1, Period: time.Minute, Burst: 1}, tollgate.PerHour(2))
	c := serve(t, newLimiter(t, newMemory(t, store.WithClock(clock.Now)), interceptor.WithRules(r), interceptor.WithAdmittedTrailers()))
	ctx := tenant(context.Background(), "a")

	trailer, _, err := say(ctx, c, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if got := one(t, trailer, fields.LegacyLimit); got != "1" {
		t.Errorf("admitted: x-ratelimit-limit = %s, want 1 (the minute's, 0 left against the hour's 1)", got)
	}

	// The minute denies, the hour would admit: one violation.
	trailer, _, err = say(ctx, c, "hi")
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded: retry after 1m0s`)
	retry, quota := grpctest.DenialDetails(st)
	if v := quota.GetViolations(); len(v) != 1 || v[0].GetQuotaValue() != 1 || !strings.Contains(v[0].GetDescription(), "1/1m0s") {
		t.Errorf("QuotaFailure = %v, want the minute's only", quota)
	}
	if d := retry.GetRetryDelay().AsDuration(); d != time.Minute {
		t.Errorf("RetryInfo = %s, want 1m", d)
	}
	if got := one(t, trailer, fields.LegacyLimit); got != "1" {
		t.Errorf("denied: x-ratelimit-limit = %s, want 1", got)
	}

	clock.Advance(time.Minute)
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	// Both deny now: two violations, and the wait is the hour's.
	trailer, _, err = say(ctx, c, "hi")
	st = wantCode(t, err, codes.ResourceExhausted, "exceeded")
	retry, quota = grpctest.DenialDetails(st)
	if v := quota.GetViolations(); len(v) != 2 {
		t.Errorf("QuotaFailure = %v, want two violations", quota)
	}
	// The hour's first unit came back 30m after the first call; 1m passed.
	if d, want := retry.GetRetryDelay().AsDuration(), 29*time.Minute; d != want {
		t.Errorf("RetryInfo = %s, want %s (the hour's, the longest)", d, want)
	}
	if got := one(t, trailer, fields.LegacyLimit); got != "2" {
		t.Errorf("denied by both: x-ratelimit-limit = %s, want 2 (the hour's)", got)
	}
	if got := one(t, trailer, fields.RetryAfter); got != "1740" {
		t.Errorf("retry-after = %s, want 1740", got)
	}
}

// Shadow rules are decided and debited but never deny: their denials are
// counted as shadow_denied and their spans carry tollgate.shadow. An
// enforcing denial keeps them from being asked at all.
func TestShadowRules(t *testing.T) {
	tp, sr := tracer(t)
	m := newMeter(t)
	enforcing := perTenant()
	trial := perTenant()
	trial.Name, trial.Limits, trial.Shadow = "trial", interceptor.Fixed(tollgate.PerHour(1)), true
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(enforcing, trial), interceptor.WithAdmittedTrailers(),
		func(c *engine.Config) { c.TracerProvider = tp }, func(c *engine.Config) { c.MeterProvider = m.provider }))
	ctx := tenant(context.Background(), "a")
	for i := range 3 {
		trailer, _, err := say(ctx, c, "hi")
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := one(t, trailer, fields.LegacyLimit); got != "3" {
			t.Errorf("call %d: x-ratelimit-limit %s, want the enforcing rule's 3", i+1, got)
		}
	}
	_, _, err := say(ctx, c, "hi")
	wantCode(t, err, codes.ResourceExhausted, `rate limit "per-tenant" exceeded`)

	got := m.decisions(t)
	for k, v := range map[string]int64{
		"per-tenant/call/allowed/true":   3,
		"per-tenant/call/denied/false":   1,
		"trial/call/allowed/true":        1,
		"trial/call/shadow_denied/true":  2,
		"trial/call/skipped/false":       1,
		"trial/call/shadow_denied/false": 0,
	} {
		if got[k] != v {
			t.Errorf("decisions[%s] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	var shadowSpans int
	for _, s := range sr.Ended() {
		a := spanAttrs(s)
		if s.Name() == "ratelimit trial" {
			shadowSpans++
			if a[telemetry.AttrShadow] != "true" {
				t.Errorf("trial span without tollgate.shadow: %v", a)
			}
		} else if _, ok := a[telemetry.AttrShadow]; ok {
			t.Errorf("enforcing span %s has tollgate.shadow: %v", s.Name(), a)
		}
	}
	if shadowSpans != 4 {
		t.Errorf("%d trial spans, want 4", shadowSpans)
	}
}

// Every rule in shadow: nothing is refused, and the decisions are still
// made all or nothing.
func TestEveryRuleInShadow(t *testing.T) {
	m := newMeter(t)
	tenantRule, global := perTenant(), perTenant()
	global.Name, global.Key, global.Limits = "global", keyfunc.Method(), interceptor.Fixed(tollgate.PerHour(2))
	tenantRule.Shadow, global.Shadow = true, true
	st := newMemory(t)
	l := newLimiter(t, st, interceptor.WithRules(tenantRule, global), func(c *engine.Config) { c.MeterProvider = m.provider })
	c := serve(t, l)
	for i := range 5 {
		if _, _, err := say(tenant(context.Background(), "a"), c, "hi"); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	got := m.decisions(t)
	if got["global/call/allowed/true"] != 2 || got["global/call/shadow_denied/true"] != 3 ||
		got["per-tenant/call/allowed/true"] != 2 || got["per-tenant/call/skipped/true"] != 3 {
		t.Errorf("decisions %v: want 2 admitted, then 3 denied by global in shadow, tenant skipped", got)
	}
	qs, err := l.Peek(context.Background(), "per-tenant", interceptor.Caller{Value: "a"})
	if err != nil || len(qs) != 1 || qs[0].Available != 1 {
		t.Errorf("Peek = %v, %v; want 1 of 3 left: the sets global denied debited nothing", qs, err)
	}
}

// When the store cannot decide, each rule applies its FailMode: a
// fail-closed rule refuses the call; otherwise the fail-local rules decide
// under their local caps and fail-open rules admit.
func TestFailModesAcrossRules(t *testing.T) {
	rules := func(modes ...interceptor.FailMode) []interceptor.Rule {
		var out []interceptor.Rule
		for _, mode := range modes {
			r := perTenant()
			r.Name, r.FailMode, r.Limits = mode.String(), mode, interceptor.Fixed(tollgate.PerHour(2))
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		modes    []interceptor.FailMode
		admitted int
		refusal  string
	}{
		{[]interceptor.FailMode{interceptor.FailOpen, engine.FailLocal}, 2, `rate limit "local" exceeded`},
		{[]interceptor.FailMode{engine.FailLocal, interceptor.FailClosed, interceptor.FailOpen}, 0, `rate limit "closed": rate limiter unavailable`},
		{[]interceptor.FailMode{interceptor.FailOpen, interceptor.FailOpen}, 3, ""},
	} {
		t.Run(fmt.Sprint(tc.modes), func(t *testing.T) {
			rs := rules(tc.modes...)
			if tc.modes[0] == tc.modes[1] {
				rs[1].Name = "open2"
			}
			l := newLimiter(t, newRedis(t, redisClient(t, closedPort(t))), interceptor.WithRules(rs...), func(c *engine.Config) { c.LocalStore = newMemory(t) },
				interceptor.WithStoreTimeout(deadStoreTimeout), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = -1, 0 })
			c := serve(t, l)
			admitted := 0
			for range 3 {
				_, _, err := say(tenant(context.Background(), "a"), c, "hi")
				if err == nil {
					admitted++
					continue
				}
				code := codes.ResourceExhausted
				if strings.Contains(tc.refusal, "unavailable") {
					code = codes.Unavailable
				}
				wantCode(t, err, code, tc.refusal)
			}
			if admitted != tc.admitted {
				t.Errorf("admitted %d of 3, want %d", admitted, tc.admitted)
			}
		})
	}
}

// recordingStore remembers the requests it is asked to decide.
type recordingStore struct {
	tollgate.Store
	mu   sync.Mutex
	reqs []tollgate.Request
}

func (s *recordingStore) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return s.Store.Allow(ctx, req)
}

func (s *recordingStore) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, reqs...)
	s.mu.Unlock()
	return s.Store.AllowAll(ctx, reqs)
}

func (s *recordingStore) last() []tollgate.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.reqs
	s.reqs = nil
	return out
}

// A request id is remembered for the call's time left plus a margin when
// the call has a deadline, for the store's own TTL otherwise; each limit of
// a multi-limit rule has its own key, after the identity.
func TestReplayTTLAndKeys(t *testing.T) {
	st := &recordingStore{Store: newMemory(t)}
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.PerSecond(5), tollgate.PerHour(20), tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 100, Period: 24 * time.Hour})
	c := serve(t, newLimiter(t, st, interceptor.WithRules(r)))
	ctx := metadata.AppendToOutgoingContext(tenant(context.Background(), "a"), idempotency.DefaultHeader, "req-1")

	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	reqs := st.last()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	wantKeys := []string{"per-tenant\x00ck:a\x1f1s", "per-tenant\x00ck:a\x1f1h0m0s", "per-tenant\x00ck:a\x1f24h0m0s"}
	for i, req := range reqs {
		if req.Key != wantKeys[i] || req.RequestID != "req-1" || req.ReplayTTL != 0 {
			t.Errorf("request %d: key %q id %q ttl %s; want key %q, id req-1, no TTL without a deadline", i, req.Key, req.RequestID, req.ReplayTTL, wantKeys[i])
		}
	}

	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, _, err := say(dctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	for _, req := range st.last() {
		if req.ReplayTTL <= 2*time.Second || req.ReplayTTL > 3*time.Second+500*time.Millisecond {
			t.Errorf("ReplayTTL = %s with a 3s deadline, want the time left plus at most 500ms", req.ReplayTTL)
		}
	}
}

// PerCaller chooses one or several limits per identity, all enforced
// together; a bad answer fails the call with Internal.
func TestPerCallerLimits(t *testing.T) {
	r := perTenant()
	r.Limits = engine.PerCaller(func(_ context.Context, tenant string) ([]tollgate.Limit, error) {
		switch tenant {
		case "gold":
			return []tollgate.Limit{tollgate.PerHour(3)}, nil
		case "silver":
			return []tollgate.Limit{tollgate.PerMinute(1), tollgate.PerHour(3)}, nil
		case "broken":
			return []tollgate.Limit{tollgate.PerHour(3), tollgate.PerHour(4)}, nil
		}
		return nil, errors.New("no tier")
	})
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(r)))
	calls := func(tenantName string) (admitted int, last error) {
		for range 4 {
			_, _, err := say(tenant(context.Background(), tenantName), c, "hi")
			if err == nil {
				admitted++
			}
			last = err
		}
		return admitted, last
	}
	if n, _ := calls("gold"); n != 3 {
		t.Errorf("gold admitted %d of 4, want 3", n)
	}
	if n, _ := calls("silver"); n != 1 {
		t.Errorf("silver admitted %d of 4, want 1 (a minute's)", n)
	}
	_, err := calls("broken")
	wantCode(t, err, codes.Internal, "same algorithm and period")
	_, err = calls("none")
	wantCode(t, err, codes.Internal, "PerCaller failed: no tier")
}

// Two rules limit each message of a stream, decided together: a message
// either rule refuses debits neither.
func TestStreamMessagesUnderTwoRules(t *testing.T) {
	one, two := tollgate.PerHour(3), tollgate.PerHour(5)
	a := chatRule(engine.MessageLimit{Limit: one})
	b := chatRule(engine.MessageLimit{Limit: two})
	b.Name = "chat2"
	l := newLimiter(t, newMemory(t), interceptor.WithRules(a, b))
	c := serve(t, l)
	s, err := c.Chat(tenant(context.Background(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := grpctest.Chat(s, 5)
	if n != 3 {
		t.Fatalf("%d messages echoed, want 3", n)
	}
	wantCode(t, err, codes.ResourceExhausted, `rate limit "chat" exceeded`)
	qs, err := l.Peek(context.Background(), "chat2", interceptor.Caller{Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if want := map[bool]int64{false: 1, true: 2}[q.PerMessage]; q.Available != want {
			t.Errorf("chat2 %v (per message %v): %d available, want %d", q.Limit, q.PerMessage, q.Available, want)
		}
	}
}

// When two rules deny one call, the status names both and has a violation
// of each; a third rule that would admit is skipped and debits nothing.
func TestTwoRulesDeny(t *testing.T) {
	m := newMeter(t)
	a, b, roomy := perTenant(), perTenant(), perTenant()
	a.Name, a.Limits = "a", interceptor.Fixed(tollgate.PerHour(1))
	b.Name, b.Limits = "b", interceptor.Fixed(tollgate.PerMinute(1))
	roomy.Name, roomy.Limits = "roomy", interceptor.Fixed(tollgate.PerHour(100))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a still clock: the waits below are exact
	mem := newMemory(t, store.WithClock(func() time.Time { return now }))
	l := newLimiter(t, mem, interceptor.WithRules(a, b, roomy), func(c *engine.Config) { c.MeterProvider = m.provider })
	c := serve(t, l)
	ctx := tenant(context.Background(), "x")
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	trailer, _, err := say(ctx, c, "hi")
	st := wantCode(t, err, codes.ResourceExhausted, `rate limits "a", "b" exceeded: retry after 1h0m0s`)
	if _, quota := grpctest.DenialDetails(st); len(quota.GetViolations()) != 2 {
		t.Errorf("QuotaFailure = %v, want a violation of a and of b", quota)
	}
	if got := one(t, trailer, fields.RetryAfter); got != "3600" {
		t.Errorf("retry-after = %s, want rule a's 3600", got)
	}
	qs, err := l.Peek(context.Background(), "roomy", interceptor.Caller{Value: "x"})
	if err != nil || qs[0].Available != 99 {
		t.Errorf("roomy: %v, %v; want 99 left: the denied call debited nothing", qs, err)
	}
	if got := m.decisions(t)["roomy/call/skipped/false"]; got != 1 {
		t.Errorf("roomy skipped %d times, want 1 (all: %v)", got, m.decisions(t))
	}
}

// A retry carrying an admitted call's request id is replayed as a whole
// under several rules and limits: admitted again, debited once.
func TestRequestIDReplayUnderSeveralRules(t *testing.T) {
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.PerMinute(2), tollgate.PerHour(3))
	global := perTenant()
	global.Name, global.Key = "global", keyfunc.Method()
	l := newLimiter(t, newMemory(t), interceptor.WithRules(r, global))
	c := serve(t, l)
	ctx := metadata.AppendToOutgoingContext(tenant(context.Background(), "a"), idempotency.DefaultHeader, "req-7")
	for i := range 3 {
		trailer, _, err := say(ctx, c, "hi")
		if err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		if i > 0 && one(t, trailer, fields.Replayed) != "1" {
			t.Errorf("attempt %d: not replayed: %v", i+1, trailer)
		}
	}
	qs, err := l.Peek(context.Background(), r.Name, interceptor.Caller{Value: "a"})
	if err != nil || len(qs) != 2 || qs[0].Available != 1 || qs[1].Available != 2 {
		t.Errorf("Peek = %v, %v; want one unit debited from each limit", qs, err)
	}
}
