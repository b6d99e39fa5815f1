package overload

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Call is what a Limiter knows of a call.
type Call struct {
	Criticality Criticality
	// Tenant is whom the call is for: calls of one Tenant share one fair
	// share under overload. "" is a tenant like any other.
	Tenant string
}

// Limiter is an adaptive concurrency limit with a waiting room. It is safe
// for concurrent use and starts no goroutine: the limit moves as calls
// finish.
type Limiter struct {
	o  Options
	mu sync.Mutex

	g           gradient
	room        room
	tenants     tenants
	inflight    int
	grants      uint64 // seats given, ever: a call ran alone if none was given while it ran
	arrivals    uint64
	empty       time.Time // the last time the room was seen empty
	swept       time.Time
	admitted    [Levels]uint64
	shed        [Levels]ShedCount
	shedBy      [3]uint64
	shedByCheck uint64
}

// New returns a Limiter, or an error naming the first bad option.
func New(o Options) (*Limiter, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	l := &Limiter{o: o, tenants: newTenants(o.MaxTenants), empty: now, swept: now}
	l.g = newGradient(&l.o, now)
	return l, nil
}

// Seat is a call's place among the calls running. Done gives it back.
type Seat struct {
	l     *Limiter
	start time.Time
	seq   uint64
	alone bool // admitted into an empty server
	done  atomic.Bool
}

// Done gives the seat back when the handler returns (a deferred call, so a
// panic frees it too) and records the call's latency. Calls after the
// first do nothing.
func (s *Seat) Done() {
	if s.done.Swap(true) {
		return
	}
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	alone := s.alone && l.grants == s.seq
	l.inflight--
	l.g.finished(now, now.Sub(s.start), alone, l.inflight)
	if now.Sub(l.swept) >= l.o.Interval {
		l.tenants.sweep()
		l.swept = now
	}
	l.dispatch(now)
}

// Check reports, without waiting, whether Acquire would refuse the call
// now: a door calls it before it spends anything on the call (before a
// gRPC stream or an HTTP body). A nil answer is no promise; a Refusal is
// counted as shed, and the call should not go on to Acquire.
func (l *Limiter) Check(c Call) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.expire(now)
	if (l.room.len() == 0 && l.g.admits(l.inflight)) || l.room.len() < l.queueCap(now) {
		return nil
	}
	if w, rank := l.room.worst(&l.tenants); ahead(c.Criticality, l.tenants.rank(c.Tenant), w.call.Criticality, rank) {
		return nil
	}
	l.shedByCheck++
	return l.refuse(c, QueueFull)
}

// Acquire returns a seat for the call, waiting for one if every seat is
// taken, or a *Refusal (errors.Is ErrShed) when the call is shed, or
// ctx's error when ctx ends first.
func (l *Limiter) Acquire(ctx context.Context, c Call) (*Seat, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	now := time.Now()
	l.expire(now)
	if l.room.len() == 0 && l.g.admits(l.inflight) {
		s := l.grant(c, now)
		l.mu.Unlock()
		return s, nil
	}
	l.g.binding()
	if l.room.len() >= l.queueCap(now) {
		w, rank := l.room.worst(&l.tenants)
		if !ahead(c.Criticality, l.tenants.rank(c.Tenant), w.call.Criticality, rank) {
			err := l.refuse(c, QueueFull)
			l.mu.Unlock()
			return nil, err
		}
		l.shedWaiter(w, Evicted, now)
	}
	if l.room.len() == 0 {
		l.empty = now
	}
	w := &waiter{call: c, since: now, seq: l.arrivals, ready: make(chan struct{})}
	l.arrivals++
	l.room.add(w)
	l.dispatch(now) // a seat may be free while others wait (the limit just grew)
	wait := l.o.MaxWait
	if l.standing(now) {
		wait = l.o.Target
	}
	l.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return w.seat, w.err
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.at < 0 { // admitted or shed meanwhile: that outcome stands
		l.mu.Unlock()
		return w.seat, w.err
	}
	now = time.Now()
	l.room.remove(w)
	l.noteEmpty(now)
	var err error = ctx.Err()
	if err == nil {
		err = l.refuse(c, QueueTimeout)
	}
	l.dispatch(now)
	l.mu.Unlock()
	return nil, err
}

// Stats returns a snapshot of the limiter.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	lim := l.g.limit
	if l.g.probing {
		lim = 1
	}
	return Stats{
		Limit: lim, InFlight: l.inflight, Queued: l.room.len(), QueueCap: l.queueCap(now),
		Standing: l.standing(now), Probing: l.g.probing, Alone: l.g.alone, Throughput: l.g.throughput,
		Admitted: l.admitted, Shed: l.shed, ShedBy: l.shedBy, ShedByCheck: l.shedByCheck,
	}
}

func (l *Limiter) grant(c Call, now time.Time) *Seat {
	alone := l.inflight == 0
	l.inflight++
	l.grants++
	l.g.granted(l.inflight)
	l.tenants.served(c.Tenant)
	l.admitted[min(c.Criticality, CriticalPlus)]++
	return &Seat{l: l, start: now, seq: l.grants, alone: alone}
}

// dispatch gives free seats to the best waiters.
func (l *Limiter) dispatch(now time.Time) {
	l.expire(now)
	for l.room.len() > 0 && l.g.admits(l.inflight) {
		w := l.room.best(&l.tenants, l.standing(now))
		l.room.remove(w)
		l.noteEmpty(now)
		w.seat = l.grant(w.call, now)
		close(w.ready)
	}
}

// expire sheds the waiters past Target while the queue is standing (CoDel).
func (l *Limiter) expire(now time.Time) {
	if !l.standing(now) {
		return
	}
	for i := l.room.len() - 1; i >= 0; i-- {
		if i < l.room.len() {
			if w := l.room.ws[i]; now.Sub(w.since) > l.o.Target {
				l.shedWaiter(w, QueueTimeout, now)
			}
		}
	}
}

func (l *Limiter) shedWaiter(w *waiter, r Reason, now time.Time) {
	l.room.remove(w)
	l.noteEmpty(now)
	w.err = l.refuse(w.call, r)
	close(w.ready)
}

func (l *Limiter) refuse(c Call, r Reason) error {
	c.Criticality = min(c.Criticality, CriticalPlus)
	l.shedBy[r]++
	if l.tenants.over(c.Tenant) {
		l.shed[c.Criticality].OverShare++
	} else {
		l.shed[c.Criticality].WithinShare++
	}
	return &Refusal{Reason: r, Criticality: c.Criticality, RetryAfter: retryAfter(l.o.RetryAfter, c.Criticality)}
}

func (l *Limiter) noteEmpty(now time.Time) {
	if l.room.len() == 0 {
		l.empty = now
	}
}

// standing reports a queue that has not been empty for an Interval.
func (l *Limiter) standing(now time.Time) bool {
	return l.room.len() > 0 && now.Sub(l.empty) > l.o.Interval
}

// queueCap is how many calls may wait: what the server drains within the
// wait bound (MaxWait, or Target when standing) at its recent throughput,
// at least the limit, at most MaxQueue.
func (l *Limiter) queueCap(now time.Time) int {
	bound := l.o.MaxWait
	if l.standing(now) {
		bound = l.o.Target
	}
	lim := int(math.Ceil(l.g.limit))
	n := 4 * lim
	if tp := l.g.throughput; tp > 0 {
		n = int(math.Ceil(tp * bound.Seconds()))
	}
	return max(1, min(l.o.MaxQueue, max(n, lim)))
}
