package rls

import (
	"sync"
	"testing"
	"time"
)

// Rebalancer drives the rebalance ticks of every stream of the quota
// servers given WithRebalancer, so that tests move time themselves.
type Rebalancer struct {
	mu    sync.Mutex
	ticks map[chan time.Time]struct{}
	// changed is closed and replaced when a stream starts or ends.
	changed chan struct{}
}

// notify wakes AwaitStreams; r.mu is held.
func (r *Rebalancer) notify() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// AwaitStreams waits until n streams tick, woken as streams start, and
// fails the test when they do not within 10 seconds.
func (r *Rebalancer) AwaitStreams(t testing.TB, n int) {
	t.Helper()
	give := time.NewTimer(10 * time.Second)
	defer give.Stop()
	for {
		r.mu.Lock()
		if len(r.ticks) >= n {
			r.mu.Unlock()
			return
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-give.C:
			t.Fatalf("%d streams tick after 10s, want %d", r.Streams(), n)
		}
	}
}

// QuotaHook changes what QuotaOptions does not say of a quota server.
type QuotaHook = func(*quotaOptions)

// NewQuotaServerHooked is NewQuotaServer with hooks applied after opts.
func NewQuotaServerHooked(s *Server, opts QuotaOptions, hooks ...QuotaHook) (*QuotaServer, error) {
	return newQuotaServer(s, opts, hooks...)
}

// WithRebalancer makes r tick the quota server's streams.
func WithRebalancer(r *Rebalancer) QuotaHook {
	return func(o *quotaOptions) {
		o.rebalance = time.Second
		o.newTicker = func(time.Duration) (<-chan time.Time, func()) {
			c := make(chan time.Time)
			r.mu.Lock()
			if r.ticks == nil {
				r.ticks = map[chan time.Time]struct{}{}
			}
			r.ticks[c] = struct{}{}
			r.notify()
			r.mu.Unlock()
			return c, func() {
				r.mu.Lock()
				delete(r.ticks, c)
				r.notify()
				r.mu.Unlock()
			}
		}
	}
}

// Streams returns how many streams tick.
func (r *Rebalancer) Streams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ticks)
}

// Tick ticks every stream once.
func (r *Rebalancer) Tick() {
	r.mu.Lock()
	chans := make([]chan time.Time, 0, len(r.ticks))
	for c := range r.ticks {
		chans = append(chans, c)
	}
	r.mu.Unlock()
	for _, c := range chans {
		select {
		case c <- time.Time{}:
		case <-time.After(time.Second): // its stream ended meanwhile
		}
	}
}

// WithIdleFills sets how many fills of the limit the data planes whose
// last report refused nothing hold as burst between them (0: none, every
// bucket's max_tokens is its share).
func WithIdleFills(f float64) QuotaHook {
	return func(o *quotaOptions) { o.idleFills = f }
}
