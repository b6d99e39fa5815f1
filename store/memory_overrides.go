package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
)

// memOverrides holds a Memory store's overrides, by scope and key, with
// their expiry (µs on the store's clock, 0 for never), and the version
// that changes with each of them.
type memOverrides struct {
	mu      sync.Mutex
	scopes  map[string]map[string]memOverride
	version int64
}

type memOverride struct {
	limits  []tollgate.Limit
	expires int64
}

// SetOverride stores o in scope for ttl (see tollgate.OverrideStore).
func (m *Memory) SetOverride(ctx context.Context, scope string, o tollgate.Override, ttl time.Duration) error {
	if err := checkOverride(ctx, o, ttl); err != nil {
		return err
	}
	now := m.clock().UnixMicro()
	var expires int64
	if ttl > 0 {
		expires = now + ttl.Microseconds()
	}
	defer m.watchers.notify()
	mo := &m.overrides
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if mo.scopes == nil {
		mo.scopes = make(map[string]map[string]memOverride)
	}
	g := mo.scopes[scope]
	if g == nil {
		g = make(map[string]memOverride)
		mo.scopes[scope] = g
	}
	mo.sweep(g, now)
	g[o.Key] = memOverride{limits: slices.Clone(o.Limits), expires: expires}
	mo.version++
	return nil
}

// DeleteOverride removes key's override from scope (see
// tollgate.OverrideStore).
func (m *Memory) DeleteOverride(ctx context.Context, scope, key string) error {
	if err := checkKey(ctx, key); err != nil {
		return err
	}
	defer m.watchers.notify()
	mo := &m.overrides
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if g := mo.scopes[scope]; g != nil {
		delete(g, key)
		if len(g) == 0 {
			delete(mo.scopes, scope)
		}
	}
	mo.version++
	return nil
}

// Overrides returns scope's overrides in force (see tollgate.OverrideStore).
func (m *Memory) Overrides(ctx context.Context, scope string) ([]tollgate.Override, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	local := m.clock() // the store's clock is this process's (WithClock)
	now := local.UnixMicro()
	mo := &m.overrides
	mo.mu.Lock()
	defer mo.mu.Unlock()
	g := mo.scopes[scope]
	mo.sweep(g, now)
	out := make([]tollgate.Override, 0, len(g))
	for key, o := range g {
		ov := tollgate.Override{Key: key, Limits: slices.Clone(o.limits)}
		if o.expires > 0 {
			ov.Expires = local.Add(micros(o.expires - now))
		}
		out = append(out, ov)
	}
	slices.SortFunc(out, func(a, b tollgate.Override) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// OverridesVersion returns the number of changes made to the overrides.
func (m *Memory) OverridesVersion(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	mo := &m.overrides
	mo.mu.Lock()
	defer mo.mu.Unlock()
	return mo.version, nil
}

// sweep drops g's expired overrides at now.
func (mo *memOverrides) sweep(g map[string]memOverride, now int64) {
	for key, o := range g {
		if o.expires > 0 && o.expires <= now {
			delete(g, key)
		}
	}
}

// checkOverride validates what SetOverride is given. Every error wraps
// tollgate.ErrInvalidRequest, but ctx's.
func checkOverride(ctx context.Context, o tollgate.Override, ttl time.Duration) error {
	if err := checkKey(ctx, o.Key); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("%w: an override's ttl must be >= 0, got %s", tollgate.ErrInvalidRequest, ttl)
	}
	if len(o.Limits) > tollgate.MaxAllowAll {
		return fmt.Errorf("%w: an override has at most %d limits, got %d", tollgate.ErrInvalidRequest, tollgate.MaxAllowAll, len(o.Limits))
	}
	for i, l := range o.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limits[%d]: %w", i, err)
		}
	}
	return nil
}

// memWatchers are the watches of a Memory store's overrides: each is
// called, in the goroutine that made the change, after it is made.
type memWatchers struct {
	mu    sync.Mutex // held while calling them: stop waits for a call under way
	next  int
	funcs map[int]func()
}

// WatchOverrides calls changed after every change of the store's overrides,
// in the goroutine that made it, until stop (see tollgate.OverrideWatcher).
// It starts no goroutine.
func (m *Memory) WatchOverrides(changed func()) (stop func()) {
	w := &m.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.funcs == nil {
		w.funcs = make(map[int]func())
	}
	id := w.next
	w.next++
	w.funcs[id] = changed
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.funcs, id)
	}
}

// notify calls every watch of the store's overrides.
func (w *memWatchers) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.funcs {
		f()
	}
}
