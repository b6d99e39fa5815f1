package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

const limitsYAML = `
domain: api
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: bucket
    rate_limit:
      unit: hour
      requests_per_unit: 100
      tollgate: {algorithm: token_bucket}
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: org
    rate_limit:
      unit: day
      requests_per_unit: 5
  - key: quota
    rate_limit:
      unit: day
      requests_per_unit: 10
  - key: watch
    shadow_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1
`

// TestExactUnderConcurrency: 64 callers, one identity: exactly the limit is
// admitted, for a fixed window and for a token bucket (extension).
func TestExactUnderConcurrency(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{limitsYAML})
		for _, key := range []string{"tenant", "bucket"} {
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						resp, err := e.call("api", 0, d(key, "acme"))
						if err != nil {
							errs <- err
							return
						}
						if resp.OverallCode == ok {
							admitted.Add(1)
						} else {
							denied.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if admitted.Load() != 100 || denied.Load() != 220 {
				t.Fatalf("%s: %d admitted, %d denied of 320; want exactly 100 and 220", key, admitted.Load(), denied.Load())
			}
		}
	})
}

// TestAllOrNothing: a request refused by one descriptor debits none of the
// others, with one store call.
func TestAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{limitsYAML})
		for range 2 {
			expect(t, "user and org", e.must(t, "api", 0, d("user", "u1"), d("org", "o1")), ok, ok, ok)
		}
		resp := e.must(t, "api", 0, d("user", "u1"), d("org", "o1"))
		expect(t, "user over", resp, over, over, ok)
		if got := resp.Statuses[1].LimitRemaining; got != 3 {
			t.Fatalf("org remaining %d after a refused set, want 3 (not debited)", got)
		}
		if n := e.admitted(t, 5, "api", 0, d("org", "o1")); n != 3 {
			t.Fatalf("org alone: %d of 5 admitted, want 3: the refused set debited it", n)
		}
	})
}

// TestHitsAddend: the request's hits_addend is the cost; a descriptor's
// own hits_addend overrides it, and 0 only looks.
func TestHitsAddend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{limitsYAML})
		for _, want := range []uint32{7, 4, 1} {
			resp := e.must(t, "api", 3, d("quota", "q"))
			expect(t, "hits 3", resp, ok, ok)
			if got := resp.Statuses[0].LimitRemaining; got != want {
				t.Fatalf("remaining %d, want %d", got, want)
			}
		}
		resp := e.must(t, "api", 3, d("quota", "q"))
		expect(t, "hits 3 with 1 left", resp, over, over)
		if got := resp.Statuses[0].LimitRemaining; got != 1 {
			t.Fatalf("denied remaining %d, want 1 (a denial debits nothing)", got)
		}
		resp = e.must(t, "api", 3, withHits(d("quota", "q"), 0))
		expect(t, "descriptor hits 0", resp, ok, ok)
		if got := resp.Statuses[0].LimitRemaining; got != 1 {
			t.Fatalf("hits 0 remaining %d, want 1", got)
		}
		expect(t, "descriptor hits 1 over request hits 3", e.must(t, "api", 3, withHits(d("quota", "q"), 1)), ok, ok)
		expect(t, "empty", e.must(t, "api", 0, d("quota", "q")), over, over)
		expect(t, "hits above the limit", e.must(t, "api", 11, d("quota", "fresh")), over, over)
		expect(t, "fresh untouched", e.must(t, "api", 10, d("quota", "fresh")), ok, ok)
	})
}

// TestShadowNeverBlocks: a shadow descriptor over its limit neither refuses
// the request nor blocks the enforced descriptors' debits.
func TestShadowNeverBlocks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{limitsYAML})
		for range 3 {
			expect(t, "shadow and user", e.must(t, "api", 0, d("watch", "w"), d("org", "o2")), ok, ok, ok)
		}
		if n := e.admitted(t, 3, "api", 0, d("org", "o2")); n != 2 {
			t.Fatalf("org after 3 shadowed calls: %d of 3 admitted, want 2", n)
		}
	})
}

// TestGlobalShadowMode: everything is decided and debited, nothing refused.
func TestGlobalShadowMode(t *testing.T) {
	b := backends()[0]
	e := newEnv(t, b, []string{limitsYAML}, func(o *rls.Options) { o.Shadow = true })
	// As in envoyproxy/ratelimit, only the overall code is forced to OK:
	// the statuses still say which descriptor was over.
	for i := range 4 {
		want := ok
		if i >= 2 {
			want = over
		}
		expect(t, "global shadow", e.must(t, "api", 0, d("user", "u")), ok, want)
	}
	// Decided and debited all the same: nothing is left.
	if got := e.must(t, "api", 0, withHits(d("user", "u"), 0)).Statuses[0].LimitRemaining; got != 0 {
		t.Fatalf("remaining %d after 4 shadowed calls on a limit of 2, want 0", got)
	}
}

// TestResponseHeaders: the descriptor closest to its limit, an over-limit
// one winning, as envoyproxy/ratelimit picks it.
func TestResponseHeaders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{limitsYAML}, func(o *rls.Options) { o.ResponseHeaders = true })
		resp := e.must(t, "api", 0, d("org", "h"), d("user", "h"))
		h := headerMap(resp)
		if h["x-ratelimit-limit"] != "2" || h["x-ratelimit-remaining"] != "1" || h["x-ratelimit-reset"] == "" || h["x-ratelimit-reset"] == "0" {
			t.Fatalf("headers %v: want the user limit (2, 1 left, reset > 0)", h)
		}
		e.must(t, "api", 0, d("user", "h"))
		resp = e.must(t, "api", 0, d("org", "h"), d("user", "h"))
		if h := headerMap(resp); h["x-ratelimit-limit"] != "2" || h["x-ratelimit-remaining"] != "0" {
			t.Fatalf("over-limit headers %v: want the user limit with 0 left", h)
		}
		if resp := e.must(t, "api", 0, d("nothing", "x")); len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("headers without a limit: %v", resp.ResponseHeadersToAdd)
		}
		e2 := newEnv(t, b, []string{limitsYAML}, func(o *rls.Options) {
			o.ResponseHeaders, o.LimitHeader, o.RemainingHeader, o.ResetHeader = true, "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"
		})
		if h := headerMap(e2.must(t, "api", 0, d("org", "h"))); h["RateLimit-Limit"] != "5" || h["RateLimit-Remaining"] != "4" {
			t.Fatalf("renamed headers %v", h)
		}
		e3 := newEnv(t, b, []string{limitsYAML})
		if resp := e3.must(t, "api", 0, d("org", "h")); len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("headers without the option: %v", resp.ResponseHeadersToAdd)
		}
	})
}

func headerMap(resp *pb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

// TestStatusFields: current_limit, limit_remaining and duration_until_reset
// of a fixed window on the Memory store's frozen clock.
func TestStatusFields(t *testing.T) {
	e := newEnv(t, backends()[0], []string{limitsYAML})
	st := e.must(t, "api", 0, d("user", "s")).Statuses[0]
	if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY || st.LimitRemaining != 1 {
		t.Fatalf("status %v", st)
	}
	midnight := fixedNow.Truncate(24 * time.Hour).Add(24 * time.Hour)
	// Whole seconds, rounded up, as envoyproxy/ratelimit reports a window's
	// reset: the clock is half a second past a second.
	if got, want := st.DurationUntilReset.AsDuration(), midnight.Sub(fixedNow)+time.Second/2; got != want {
		t.Fatalf("duration_until_reset %s, want %s (the day window's end, in whole seconds)", got, want)
	}
}

// TestLimitOverride: a descriptor carrying its own limit (Envoy's limit
// override) is limited by it.
func TestLimitOverride(t *testing.T) {
	e := newEnv(t, backends()[0], []string{limitsYAML})
	desc := d("tenant", "ov")
	desc.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	if n := e.admitted(t, 4, "api", 0, desc); n != 2 {
		t.Fatalf("override 2/hour: %d of 4 admitted", n)
	}
}

// TestUnknownDomainAndUnmatched: OK with no limit, as envoyproxy/ratelimit.
func TestUnknownDomainAndUnmatched(t *testing.T) {
	e := newEnv(t, backends()[0], []string{limitsYAML})
	for _, domain := range []string{"nope", "api"} {
		resp := e.must(t, domain, 0, d("unknown", "x"), d("tenant", "a", "extra", "b"))
		expect(t, domain, resp, ok, ok, ok)
		for _, st := range resp.Statuses {
			if st.CurrentLimit != nil {
				t.Fatalf("%s: a limit for an unmatched descriptor: %v", domain, st)
			}
		}
	}
}

// TestBadRequests: InvalidArgument, never a crash.
func TestBadRequests(t *testing.T) {
	e := newEnv(t, backends()[0], []string{limitsYAML})
	many := func(n int, f func(i int) *rlv3.RateLimitDescriptor) []*rlv3.RateLimitDescriptor {
		var out []*rlv3.RateLimitDescriptor
		for i := range n {
			out = append(out, f(i))
		}
		return out
	}
	long := d()
	for i := range 100 {
		long.Entries = append(long.Entries, &rlv3.RateLimitDescriptor_Entry{Key: fmt.Sprint("k", i), Value: "v"})
	}
	cases := []struct {
		name   string
		domain string
		descs  []*rlv3.RateLimitDescriptor
	}{
		{"empty domain", "", []*rlv3.RateLimitDescriptor{d("tenant", "x")}},
		{"no descriptors", e.prefix + "api", nil},
		{"thousands of descriptors", e.prefix + "api", many(5000, func(i int) *rlv3.RateLimitDescriptor { return d("other", "x") })},
		{"too many limited descriptors", e.prefix + "api", many(tollgate.MaxAllowAll+1, func(i int) *rlv3.RateLimitDescriptor { return d("tenant", fmt.Sprint(i)) })},
		{"too many entries", e.prefix + "api", []*rlv3.RateLimitDescriptor{long}},
		{"huge value", e.prefix + "api", []*rlv3.RateLimitDescriptor{d("tenant", strings.Repeat("v", tollgate.MaxKeyLen))}},
	}
	for _, c := range cases {
		_, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: c.domain, Descriptors: c.descs})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	// At the bound it works.
	resp := e.must(t, "api", 0, many(tollgate.MaxAllowAll, func(i int) *rlv3.RateLimitDescriptor { return d("tenant", fmt.Sprint(i)) })...)
	if resp.OverallCode != ok {
		t.Fatalf("MaxAllowAll descriptors: %s", resp.OverallCode)
	}
}

// failingStore fails every call, counting them: a store that is down.
type failingStore struct {
	tollgate.Store
	calls atomic.Int64
}

func (f *failingStore) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	f.calls.Add(1)
	return nil, fmt.Errorf("connection refused")
}

// TestFailPolicy: AnswerUnavailable answers Unavailable so that Envoy's
// failure_mode_deny decides; AnswerOK answers OK. The breaker stops asking
// a store that keeps failing.
func TestFailPolicy(t *testing.T) {
	cfg, err := rls.ParseConfig(rls.File{Name: "api.yaml", Data: []byte(limitsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d("tenant", "x"), d("nothing", "y")}}

	st := &failingStore{Store: newMemory(t)}
	srv, err := rls.NewServer(st, rls.Options{Config: cfg, BreakerFailures: 3, BreakerCoolDown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := srv.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
			t.Fatalf("AnswerUnavailable: %v, want Unavailable", err)
		}
	}
	if got := st.calls.Load(); got != 3 {
		t.Fatalf("store asked %d times by 10 calls; want 3 (the breaker opens after 3 failures)", got)
	}

	st = &failingStore{Store: newMemory(t)}
	srv, err = rls.NewServer(st, rls.Options{Config: cfg, StoreFailAnswer: rls.AnswerOK})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 {
		t.Fatalf("AnswerOK: %v, %v; want OK with the current limit", resp, err)
	}
}

// slowStore never answers before its context ends: a hung Redis.
type slowStore struct{ tollgate.Store }

func (slowStore) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStoreDeadline: a hung store costs one store timeout, not the call's.
func TestStoreDeadline(t *testing.T) {
	cfg, err := rls.ParseConfig(rls.File{Name: "api.yaml", Data: []byte(limitsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewServer(slowStore{}, rls.Options{Config: cfg, StoreTimeout: 20 * time.Millisecond, StoreFailAnswer: rls.AnswerOK})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := srv.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d("tenant", "x")}})
	if err != nil || resp.OverallCode != ok {
		t.Fatalf("hung store with AnswerOK: %v, %v", resp, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %s: the store deadline did not apply", el)
	}
}

func TestNewServerRejectsBadOptions(t *testing.T) {
	st := newMemory(t)
	for name, opts := range map[string]rls.Options{
		"timeout":     {StoreTimeout: -time.Second},
		"cool-down":   {BreakerFailures: 3, BreakerCoolDown: -time.Second},
		"fail answer": {StoreFailAnswer: 9},
		"header name": {ResponseHeaders: true, LimitHeader: "bad name"},
	} {
		if _, err := rls.NewServer(st, opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := rls.NewServer(nil, rls.Options{}); err == nil {
		t.Error("nil store: no error")
	}
	if _, err := rls.NewServer((*store.Memory)(nil), rls.Options{}); err == nil {
		t.Error("typed nil store: no error")
	}
	if _, err := rls.NewQuotaServer(nil, rls.QuotaOptions{}); err == nil {
		t.Error("nil server: no error")
	}
}

// TestNewQuotaServerRejectsBadOptions: a QuotaOptions the quota service
// cannot run with is an error at construction; the zero value and a
// negative RebalanceInterval (off) are not.
func TestNewQuotaServerRejectsBadOptions(t *testing.T) {
	srv, err := rls.NewServer(newMemory(t), rls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]rls.QuotaOptions{
		"report interval below 1s":    {ReportInterval: 999 * time.Millisecond},
		"negative report interval":    {ReportInterval: -time.Second},
		"negative assignment reports": {AssignmentReports: -1},
	} {
		if _, err := rls.NewQuotaServer(srv, opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for name, opts := range map[string]rls.QuotaOptions{
		"zero value":    {},
		"rebalance off": {RebalanceInterval: -1},
		"every field":   {ReportInterval: time.Second, AssignmentReports: 1, RebalanceInterval: time.Millisecond, Clock: time.Now},
	} {
		if _, err := rls.NewQuotaServer(srv, opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestReload: SetConfig swaps limits while calls run; none fails.
func TestReload(t *testing.T) {
	e := newEnv(t, backends()[0], []string{limitsYAML})
	v2 := strings.Replace(limitsYAML, "requests_per_unit: 2\n", "requests_per_unit: 4\n", 1)
	cfg2, err := rls.ParseConfig(e.files(backends()[0], []string{v2})...)
	if err != nil {
		t.Fatal(err)
	}
	cfg1 := e.srv.Config()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.call("api", 0, d("tenant", "reload")); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	for i := range 200 {
		if i%2 == 0 {
			e.srv.SetConfig(cfg2)
		} else {
			e.srv.SetConfig(cfg1)
		}
	}
	close(stop)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d calls failed during reloads", failures.Load())
	}
	e.srv.SetConfig(cfg2)
	if n := e.admitted(t, 6, "api", 0, d("user", "after-reload")); n != 4 {
		t.Fatalf("after reload: %d of 6 admitted, want the new limit 4", n)
	}
}

// TestRedisDown: a stopped Redis gives the fail mode's answer, quickly.
func TestRedisDown(t *testing.T) {
	srvRedis := redistest.Start(t)
	st := newRedis(t, srvRedis.Client(t))
	srvRedis.Stop(t)
	cfg, err := rls.ParseConfig(rls.File{Name: "api.yaml", Data: []byte(limitsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d("tenant", "x")}}
	for _, mode := range []rls.StoreFailAnswer{rls.AnswerUnavailable, rls.AnswerOK} {
		srv, err := rls.NewServer(st, rls.Options{Config: cfg, StoreFailAnswer: mode})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		switch mode {
		case rls.AnswerUnavailable:
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("AnswerUnavailable with Redis down: %v, %v; want Unavailable", resp, err)
			}
		case rls.AnswerOK:
			if err != nil || resp.OverallCode != ok {
				t.Fatalf("AnswerOK with Redis down: %v, %v; want OK", resp, err)
			}
		}
	}
}

// TestReplacesNeverDropsUnlimited: as in envoyproxy/ratelimit, a replaced
// name drops limited descriptors only; an unlimited one stays unlimited.
func TestReplacesNeverDropsUnlimited(t *testing.T) {
	e := newEnv(t, backends()[0], []string{`
domain: rep
descriptors:
  - key: a
    rate_limit: {name: base, unlimited: true}
  - key: b
    rate_limit: {name: base2, unit: day, requests_per_unit: 1}
  - key: c
    rate_limit:
      unit: day
      requests_per_unit: 5
      replaces: [{name: base}, {name: base2}]
`})
	for range 3 {
		resp := e.must(t, "rep", 0, d("a", "x"), d("b", "x"), d("c", "x"))
		expect(t, "all three", resp, ok, ok, ok, ok)
		if resp.Statuses[0].LimitRemaining != 4294967295 || resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("statuses %v: want a unlimited and b replaced", resp.Statuses)
		}
	}
}
