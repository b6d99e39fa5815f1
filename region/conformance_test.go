package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/store"
	"github.com/tollgate/tollgate/store/storetest"
)

// oneRegion is the conformance suite's store: a Region of one region
// whose floor is the whole limit, so that it decides every request as its
// local store would (the share never leaves the floor, and needs no
// raise), made on first use for each set of global limits the suite
// asks under, every one on the same local store. The suite's limits are
// not known before it runs; a Region's are fixed at New.
type oneRegion struct {
	t     *testing.T
	local tollgate.Store
	home  Home

	mu      sync.Mutex
	regions map[string]*Region // by the limits' set
}

func (o *oneRegion) regionFor(reqs ...tollgate.Request) (*Region, error) {
	var limits []tollgate.Limit
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		l := normalize(r.Limit)
		if !slices.Contains(limits, l) {
			limits = append(limits, l)
		}
	}
	name := fmt.Sprint(limits)
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.regions[name]; r != nil {
		return r, nil
	}
	shortest := time.Second
	for _, l := range limits {
		shortest = min(shortest, windowLength(l))
	}
	r, err := New(o.local, o.home, Config{Region: "only", Regions: []string{"only"}, Limits: limits, Floor: 1, WindowFloor: 1,
		Rebalance: max(10*time.Millisecond, shortest/4), ClockSkew: time.Nanosecond})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", tollgate.ErrInvalidRequest, err)
	}
	o.regions[name] = r
	o.t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			o.t.Error(err)
		}
	})
	return r, nil
}

func (o *oneRegion) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	r, err := o.regionFor(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	return r.Allow(ctx, req)
}

func (o *oneRegion) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	if len(reqs) == 0 || len(reqs) > tollgate.MaxAllowAll {
		return nil, errors.Join(tollgate.ErrInvalidRequest, fmt.Errorf("%d requests", len(reqs)))
	}
	r, err := o.regionFor(reqs...)
	if err != nil {
		return nil, err
	}
	return r.AllowAll(ctx, reqs)
}

func (o *oneRegion) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	r, err := o.regionFor(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	return r.Peek(ctx, req)
}

func (o *oneRegion) Reset(ctx context.Context, req tollgate.Request) error {
	r, err := o.regionFor(req)
	if err != nil {
		return err
	}
	return r.Reset(ctx, req)
}

// notShared is why the cases of a sliding window do not run on a Region.
const notShared = "a sliding window is not shared among regions: New refuses it"

// TestConformance runs the store conformance suite on Regions of one
// region over the Memory store: what a Region shares (token buckets, fixed
// windows; GCRA, decided as a token bucket of the share, answers the
// suite's GCRA cases alike) it decides as its store would. The cases it
// does not run are skipped, each with the reason; the suite runs its
// settle, seat and override cases only on a store that has them, which a
// Region has not (costs known after the call, seats and overrides are not
// shared among regions).
func TestConformance(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	o := &oneRegion{t: t, local: newMemory(t, store.WithClock(clock.Now)), home: NewMemoryHome(nil), regions: map[string]*Region{}}
	skip := map[string]string{}
	for _, name := range []string{"fresh_window", "fill_and_deny", "denial_debits_nothing", "previous_window_weighted", "retry_after_is_exact", "request_id"} {
		skip["sequences/sliding_window/"+name] = notShared
	}
	for _, name := range []string{"key_isolation", "AllowAll_two_limits_of_one_identity", "Peek_never_debits", "Reset_restores_capacity",
		"concurrency/sliding_window", "concurrent_replays/sliding_window"} {
		skip[name] = notShared + " (the case decides one among the other algorithms)"
	}
	skip["settle/overdraw"] = notShared + " (the case overdraws one after the other algorithms, which pass)"
	storetest.Run(t, storetest.Harness{Store: o, Advance: clock.Advance, MaxReplays: 4 /* the store's default */, Skip: skip})
}
