package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// counting is an inner store that counts its decisions and the units it
// debited (admitted, not replayed).
type counting struct {
	tollgate.Store
	calls, debited atomic.Int64
	mu             sync.Mutex
	leases         []int64 // the costs above 1 admitted, in order
}

func (c *counting) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	c.calls.Add(1)
	d, err := c.Store.Allow(ctx, req)
	if err == nil && d.Allowed && !d.Replayed {
		c.debited.Add(max(req.Cost, 1))
		if req.Cost > 1 {
			c.mu.Lock()
			c.leases = append(c.leases, req.Cost)
			c.mu.Unlock()
		}
	}
	return d, err
}

// held is the units s holds in unexpired leases, not yet spent.
func held(s *Store) int64 {
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, e := range s.entries {
		for _, g := range []*grant{e.cur.Load(), e.next.Load()} {
			if g != nil && now < g.expires {
				n += g.units.Load()
			}
		}
	}
	return n
}

func mustNew(t testing.TB, inner tollgate.Store, opts ...Option) *Store {
	t.Helper()
	s, err := New(inner, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	inner := newMemory(t)
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithLifetime(0), "WithLifetime(0s)"},
		{WithLifetime(2 * time.Minute), "WithLifetime(2m0s)"},
		{WithHotThreshold(-1, time.Second), "WithHotThreshold(-1, 1s)"},
		{WithHotThreshold(10, 0), "WithHotThreshold(10, 0s)"},
		{WithHotThreshold(10, time.Hour), "WithHotThreshold(10, 1h0m0s)"},
		{WithMaxShare(0), "WithMaxShare(0)"},
		{WithMaxShare(0.75), "WithMaxShare(0.75)"},
		{WithMaxLeases(0), "WithMaxLeases(0)"},
		{WithClock(nil), "WithClock(nil)"},
	} {
		_, err := New(inner, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %s: error %v, want one naming it", tc.want, err)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	if _, err := New((*store.Memory)(nil)); err == nil {
		t.Error("New of a typed nil store: no error")
	}
	if _, err := New(inner); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

// An identity decided at most n times per interval never leases: each of
// its decisions is one decision of the inner store.
func TestColdIdentityGoesToInnerStore(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(10, time.Second), WithClock(clock.Now))
	req := tollgate.Request{Key: "cold", Limit: tollgate.PerSecond(10_000)}
	ctx := context.Background()
	for round := range 3 {
		for range 10 {
			if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("round %d: %+v, %v", round, d, err)
			}
		}
		clock.Advance(time.Second)
	}
	if got := inner.calls.Load(); got != 30 {
		t.Errorf("30 cold decisions made %d inner decisions, want 30", got)
	}
	if got := inner.debited.Load(); got != 30 {
		t.Errorf("debited %d units, want 30", got)
	}
}

// Past the threshold, an identity takes a lease and admits from it without
// asking the inner store; Remaining counts the lease and the store's rest.
func TestHotIdentityAdmitsFromLease(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(10, time.Second), WithClock(clock.Now),
		WithLifetime(time.Second), WithMaxShare(0.01))
	req := tollgate.Request{Key: "hot", Limit: tollgate.PerSecond(100_000)}
	ctx := context.Background()
	for i := range 10 {
		if _, err := s.Allow(ctx, req); err != nil {
			t.Fatal(i, err)
		}
	}
	// The 11th decision turns it hot: the first lease is sized for a quarter
	// of the lifetime at the threshold's rate, 11/s × 250ms → minLease.
	d, err := s.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	if got := inner.calls.Load(); got != 11 {
		t.Fatalf("after the 11th decision, %d inner decisions, want 11", got)
	}
	if got, want := inner.debited.Load(), int64(10+minLease); got != want {
		t.Fatalf("debited %d, want %d", got, want)
	}
	// Store: 100000 - 12 left; lease: 1 left.
	if d.Remaining != 100_000-12+1 {
		t.Errorf("Remaining %d, want %d", d.Remaining, 100_000-12+1)
	}
	// The rest of the lease: no inner decision.
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 100_000-12 {
		t.Fatalf("%+v, %v", d, err)
	}
	if got := inner.calls.Load(); got != 11 {
		t.Errorf("a decision from the lease asked the inner store: %d calls", got)
	}
	// Leases grow at most fourfold each, up to 1% of the capacity (1000):
	// 2 → 8 → 32 → 128 → 512 → 1000. From 8 on, the next lease is asked
	// for when the current one is down to a quarter: while the 1000 is
	// spent, the next 1000 is taken.
	for i := range 8 + 32 + 128 + 512 + 1000 {
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("decision %d from leases: %+v, %v", i, d, err)
		}
	}
	want := []int64{2, 8, 32, 128, 512, 1000, 1000}
	if !slices.Equal(inner.leases, want) {
		t.Errorf("leases %v, want %v", inner.leases, want)
	}
	if got := inner.calls.Load(); got != 10+int64(len(want)) {
		t.Errorf("%d inner decisions, want %d", got, 10+len(want))
	}
}

// Many goroutines on four tiers over one inner store, far over the quota:
// the tiers admit no more than the inner store debited, the inner store
// debits exactly the quota, and what is not admitted is what the tiers
// still hold, at most one lease each.
func TestFourTiersAdmitTheQuotaExactly(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0)) // frozen: no refill, no lease expires
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
		limit := tollgate.Limit{Algorithm: alg, Rate: 10_000, Period: time.Hour}
		tiers := make([]*Store, 4)
		for i := range tiers {
			tiers[i] = mustNew(t, inner, WithClock(clock.Now), WithMaxShare(0.01))
		}
		admitted := redistest.Hammer(t, len(tiers), 64, 500, func(i int) (bool, error) {
			d, err := tiers[i].Allow(context.Background(), tollgate.Request{Key: "shared", Limit: limit})
			return d.Allowed, err
		})
		checkTotals(t, alg.String(), tiers, inner, admitted, 10_000, 0, 100)
	}
}

// checkTotals checks that the tiers admitted at most what inner debited,
// that inner debited the quota (up to refill more), and that the difference
// is exactly what the tiers hold, at most two leases of maxLease each.
func checkTotals(t *testing.T, name string, tiers []*Store, inner *counting, admitted, quota, refill, maxLease int64) {
	t.Helper()
	debited := inner.debited.Load()
	var h int64
	for _, s := range tiers {
		h += held(s)
	}
	if debited < quota || debited > quota+refill {
		t.Errorf("%s: inner store debited %d, want %d to %d", name, debited, quota, quota+refill)
	}
	if admitted+h != debited {
		t.Errorf("%s: admitted %d + held %d != debited %d", name, admitted, h, debited)
	}
	if h > 2*int64(len(tiers))*maxLease {
		t.Errorf("%s: %d units held, more than %d tiers × 2 leases of %d", name, h, len(tiers), maxLease)
	}
	t.Logf("%s: quota %d (+%d refill), debited %d, admitted %d, held %d, %d inner decisions",
		name, quota, refill, debited, admitted, h, inner.calls.Load())
}

// At the limit, refused leases shrink and then give way to decisions one at
// a time: the last unit of the quota is still admitted.
func TestAtTheLimitEveryUnitIsAdmitted(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithMaxShare(0.5))
	// Another client takes 997 of 1000: 3 left.
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1000, Period: time.Hour}
	if d, err := inner.Store.Allow(context.Background(), tollgate.Request{Key: "k", Limit: limit, Cost: 997}); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	var admitted int
	for range 10 {
		d, err := s.Allow(context.Background(), tollgate.Request{Key: "k", Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if d.RetryAfter <= 0 {
			t.Errorf("a denial without RetryAfter: %+v", d)
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d of the 3 units left, want 3", admitted)
	}
}

// A lease is spent only within its lifetime; an identity that stopped
// being hot goes back to the inner store, and its unspent units are lost.
func TestLeaseExpiresAndColdIdentityLeaves(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithLifetime(time.Second))
	req := tollgate.Request{Key: "k", Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1000, Period: time.Hour}}
	ctx := context.Background()
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if got := held(s); got != minLease-1 {
		t.Fatalf("held %d, want %d", got, minLease-1)
	}
	clock.Advance(time.Second)
	if got := held(s); got != 0 {
		t.Errorf("an expired lease still holds %d", got)
	}
	// One unit per lifetime is not hot (hot means more than 0 per second,
	// and the last lease spent 1 in 1s = 1/s > 0): it renews.
	calls := inner.calls.Load()
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if got := inner.calls.Load() - calls; got != 1 {
		t.Errorf("%d inner decisions after the lease expired, want 1", got)
	}

	// With a threshold of 100/s, a lease that spent 1 unit in a lifetime
	// is cold: the entry goes, and decisions go to the inner store.
	s2 := mustNew(t, inner, WithHotThreshold(100, time.Second), WithClock(clock.Now), WithLifetime(time.Second))
	req.Key = "k2"
	for range 101 {
		_, _ = s2.Allow(ctx, req)
	}
	s2.mu.RLock()
	n := len(s2.entries)
	s2.mu.RUnlock()
	if n != 1 {
		t.Fatalf("%d entries after 101 decisions, want 1", n)
	}
	clock.Advance(2 * time.Second)
	_, _ = s2.Allow(ctx, req)
	s2.mu.RLock()
	n = len(s2.entries)
	s2.mu.RUnlock()
	if n != 0 {
		t.Errorf("a cold identity kept its entry")
	}
}

// A FixedWindow lease ends with the window that counted it.
func TestWindowLeaseEndsWithItsWindow(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0)) // on a whole second
	clock.Advance(900 * time.Millisecond)
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithLifetime(time.Minute))
	req := tollgate.Request{Key: "w", Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1000, Period: time.Second}}
	ctx := context.Background()
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.ResetAfter != 100*time.Millisecond {
		t.Fatal(d, err)
	}
	if held(s) == 0 {
		t.Fatal("no lease held")
	}
	clock.Advance(100 * time.Millisecond)
	if got := held(s); got != 0 {
		t.Errorf("the lease outlived its window by holding %d", got)
	}
}

// Reset drops the lease: after it, the identity is debited afresh.
func TestResetDropsTheLease(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithMaxShare(0.5))
	req := tollgate.Request{Key: "r", Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 10, Period: time.Hour}}
	ctx := context.Background()
	for range 3 {
		_, _ = s.Allow(ctx, req)
	}
	if held(s) == 0 {
		t.Fatal("no lease held")
	}
	if err := s.Reset(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := held(s); got != 0 {
		t.Errorf("Reset left %d units leased", got)
	}
	var admitted int
	for range 20 {
		if d, _ := s.Allow(ctx, req); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("after Reset, %d admitted, want the full 10", admitted)
	}
	d, err := s.Peek(ctx, req)
	if err != nil || d.Remaining != 0 {
		t.Errorf("Peek: %+v, %v", d, err)
	}
}

// A request with a RequestID goes to the inner store, which replays it.
func TestRequestIDGoesToInnerStore(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now))
	req := tollgate.Request{Key: "id", Limit: tollgate.PerSecond(1000), RequestID: "call-1"}
	ctx := context.Background()
	for i := range 3 {
		d, err := s.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Replayed != (i > 0) {
			t.Fatalf("attempt %d: %+v, %v", i, d, err)
		}
	}
	if inner.calls.Load() != 3 || inner.debited.Load() != 1 || held(s) != 0 {
		t.Errorf("%d inner decisions, %d debited, %d held; want 3, 1, 0", inner.calls.Load(), inner.debited.Load(), held(s))
	}
}

// Invalid requests are refused as the inner store would; AllowAll passes
// through.
func TestInvalidRequestsAndAllowAll(t *testing.T) {
	s := mustNew(t, newMemory(t), WithHotThreshold(0, time.Second))
	_, err := s.Allow(context.Background(), tollgate.Request{Key: "x", Limit: tollgate.PerSecond(10), Cost: 11})
	if !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Errorf("cost above capacity: %v, want ErrInvalidRequest", err)
	}
	ds, err := s.AllowAll(context.Background(), []tollgate.Request{
		{Key: "a", Limit: tollgate.PerSecond(10), Cost: 10},
		{Key: "b", Limit: tollgate.PerSecond(10), Cost: 10},
	})
	if err != nil || len(ds) != 2 || !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("AllowAll: %+v, %v", ds, err)
	}
}

// The table holds at most WithMaxLeases identities.
func TestLeasesAreBounded(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	s := mustNew(t, newMemory(t, store.WithClock(clock.Now)), WithHotThreshold(0, time.Second), WithClock(clock.Now), WithMaxLeases(8))
	for i := range 100 {
		clock.Advance(time.Millisecond)
		req := tollgate.Request{Key: "id-" + string(rune('A'+i)), Limit: tollgate.PerSecond(1000)}
		if d, err := s.Allow(context.Background(), req); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	s.mu.RLock()
	n := len(s.entries)
	_, late := s.entries[leaseKey{"id-" + string(rune('A'+99)), tollgate.PerSecond(1000)}]
	s.mu.RUnlock()
	if n != 8 || late {
		t.Errorf("%d entries, the last identity's among them: %v; want 8, the first ones", n, late)
	}
	// A lifetime later the first entries are idle: a new hot identity
	// takes the place of one.
	clock.Advance(time.Second)
	req := tollgate.Request{Key: "newcomer", Limit: tollgate.PerSecond(1000)}
	if d, err := s.Allow(context.Background(), req); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	s.mu.RLock()
	n = len(s.entries)
	_, newcomer := s.entries[leaseKey{req.Key, req.Limit}]
	s.mu.RUnlock()
	if n != 8 || !newcomer {
		t.Errorf("%d entries, the newcomer among them: %v; want 8, true", n, newcomer)
	}
}

// gated holds every lease request (Cost > 1) until released.
type gated struct {
	tollgate.Store
	asked, release chan struct{}
}

func (g *gated) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if req.Cost > 1 {
		g.asked <- struct{}{}
		<-g.release
	}
	return g.Store.Allow(ctx, req)
}

// A lease asked for while a Reset runs is not kept: its units were debited
// before the reset, and spending them after it would admit more than the
// fresh quota.
func TestLeaseOverlappingResetIsNotKept(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &gated{Store: newMemory(t, store.WithClock(clock.Now)), asked: make(chan struct{}), release: make(chan struct{})}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithMaxShare(0.5))
	req := tollgate.Request{Key: "r", Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 10, Period: time.Hour}}
	ctx := context.Background()
	done := make(chan tollgate.Decision)
	go func() {
		d, _ := s.Allow(ctx, req)
		done <- d
	}()
	<-inner.asked // the lease is being asked for
	if err := s.Reset(ctx, req); err != nil {
		t.Fatal(err)
	}
	close(inner.release)
	if d := <-done; !d.Allowed {
		t.Fatalf("the request that asked for the lease: %+v", d)
	}
	if got := held(s); got != 0 {
		t.Errorf("a lease debited across a Reset holds %d units", got)
	}
}

// With WithDebitRetriesWhenHot, hot requests with ids are admitted from the
// lease, and a retry is debited again; cold ones keep their ids.
func TestDebitRetriesWhenHot(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(2, time.Second), WithClock(clock.Now), WithDebitRetriesWhenHot())
	req := tollgate.Request{Key: "id", Limit: tollgate.PerSecond(1000), RequestID: "call-1"}
	ctx := context.Background()
	// Cold: the first two go to the inner store, the second replays.
	for i := range 2 {
		d, err := s.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Replayed != (i == 1) {
			t.Fatalf("cold attempt %d: %+v, %v", i, d, err)
		}
	}
	// Hot: from a lease of 2, each attempt debited.
	for i := range 2 {
		d, err := s.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("hot attempt %d: %+v, %v", i, d, err)
		}
	}
	if inner.calls.Load() != 3 || inner.debited.Load() != 1+minLease || held(s) != 0 {
		t.Errorf("%d inner decisions, %d debited, %d held; want 3, %d, 0", inner.calls.Load(), inner.debited.Load(), held(s), 1+minLease)
	}
}

// A request waiting for another request's lease waits at most half its
// time left, then is decided on the inner store alone.
func TestSlowLeaseIsNotWaitedForPastHalfTheDeadline(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &gated{Store: newMemory(t, store.WithClock(clock.Now)), asked: make(chan struct{}), release: make(chan struct{})}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now))
	req := tollgate.Request{Key: "slow", Limit: tollgate.PerSecond(1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Allow(context.Background(), req)
	}()
	<-inner.asked // the first request's lease is on its way, and stays there
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	d, err := s.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Errorf("the waiting request: %+v, %v; want it admitted by the inner store", d, err)
	}
	close(inner.release)
	<-done
}

// The lease asked for ahead of need is spent once the current one cannot
// pay, expired or used up.
func TestNextLeaseTakesOver(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := &counting{Store: newMemory(t, store.WithClock(clock.Now))}
	s := mustNew(t, inner, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithLifetime(time.Second))
	req := tollgate.Request{Key: "n", Limit: tollgate.PerSecond(10_000)}
	ctx := context.Background()
	allow := func(n int) {
		t.Helper()
		for i := range n {
			if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("decision %d: %+v, %v", i, d, err)
			}
		}
	}
	allow(3) // a lease of 2, then one of 8 with 7 left
	clock.Advance(500 * time.Millisecond)
	allow(6) // down to 1: the next lease is taken
	if len(inner.leases) != 3 {
		t.Fatalf("leases %v, want three", inner.leases)
	}
	clock.Advance(600 * time.Millisecond) // the lease of 8 expired with 1 unit, the next did not
	calls := inner.calls.Load()
	allow(1)
	if got := inner.calls.Load(); got != calls {
		t.Errorf("the decision after the current lease expired asked the inner store (%d calls)", got-calls)
	}
	if got, want := held(s), inner.leases[2]-1; got != want {
		t.Errorf("held %d, want %d", got, want)
	}
}

// More hot identities than the table holds, from many goroutines on four
// tiers: those without a place are decided on the inner store, no identity
// is admitted more than its quota, and no unit is lost but those held.
func TestFullTableLosesNothing(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0)) // frozen: no refill
	shared := newMemory(t, store.WithClock(clock.Now))
	tiers := make([]*Store, 4)
	for i := range tiers {
		tiers[i] = mustNew(t, shared, WithHotThreshold(0, time.Second), WithClock(clock.Now), WithMaxLeases(2), WithMaxShare(0.05))
	}
	const identities, quota = 8, 1000
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: quota, Period: time.Hour}
	var admitted [identities]atomic.Int64
	var seq atomic.Int64
	redistest.Hammer(t, len(tiers), 64, 400, func(i int) (bool, error) {
		id := seq.Add(1) % identities
		d, err := tiers[i].Allow(context.Background(), tollgate.Request{Key: "id-" + string(rune('a'+id)), Limit: limit})
		if d.Allowed {
			admitted[id].Add(1)
		}
		return d.Allowed, err
	})
	var total int64
	for id := range admitted {
		n := admitted[id].Load()
		total += n
		if n > quota {
			t.Errorf("identity %d: %d admitted, more than its quota %d", id, n, quota)
		}
	}
	var h int64
	for _, s := range tiers {
		h += held(s)
	}
	if total+h != identities*quota {
		t.Errorf("admitted %d + held %d, want all %d units", total, h, identities*quota)
	}
	t.Logf("%d admitted of %d identities × %d, %d held", total, identities, quota, h)
	for i, s := range tiers {
		s.mu.RLock()
		n := len(s.entries)
		s.mu.RUnlock()
		if n > 2 {
			t.Errorf("tier %d holds %d entries, more than 2", i, n)
		}
	}
}
