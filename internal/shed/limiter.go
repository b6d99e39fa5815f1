package shed

import (
	"context"
	"github.com/tollgate/tollgate/overload"
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
	// Class is what the call is (its method): a call's latency is compared
	// with the latency alone of its own class, so that a slow method is
	// not read as a slow server. "" is a class like any other.
	Class string
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
	o, err := settle(o)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	l := &Limiter{o: o, tenants: newTenants(o.MaxTenants), room: newRoom(now), swept: now}
	l.g = newGradient(&l.o, now)
	return l, nil
}

// Seat is a call's place among the calls running. Done gives it back.
type Seat struct {
	l     *Limiter
	start time.Time
	seq   uint64
	alone bool // admitted into an empty server
	class *class
	done  atomic.Bool
}

// Done gives the seat back when the handler returns (a deferred call, so a
// panic frees it too) and records the call's latency. Calls after the
// first do nothing.
func (s *Seat) Done() { s.giveBack(true) }

// Release gives the seat back for a call whose handler never ran (the
// call was refused after it was seated): it records no latency, since the
// call measured nothing of the server. Calls after the first, or after
// Done, do nothing.
func (s *Seat) Release() { s.giveBack(false) }

// giveBack frees the seat, once, recording the call's latency when ran.
func (s *Seat) giveBack(ran bool) {
	if s.done.Swap(true) {
		return
	}
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.inflight--
	if ran {
		alone := s.alone && l.grants == s.seq
		l.g.finished(now, now.Sub(s.start), alone, l.inflight, s.class)
		if now.Sub(l.swept) >= l.o.Interval {
			l.tenants.sweep()
			l.swept = now
		}
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
	if l.admitsNow(c.Criticality) {
		return nil
	}
	if ok, _ := l.place(c, now); ok {
		return nil
	}
	l.shedByCheck++
	return l.refuseFull(c)
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
	if l.admitsNow(c.Criticality) {
		s := l.grant(c, l.tenants.take(c.Tenant), now)
		l.mu.Unlock()
		return s, nil
	}
	l.g.binding()
	ok, evict := l.place(c, now)
	if !ok {
		err := l.refuseFull(c)
		l.mu.Unlock()
		return nil, err
	}
	if evict != nil {
		l.shedWaiter(evict, Evicted, now)
	}
	w := &waiter{call: c, tag: l.tenants.take(c.Tenant), since: now, seq: l.arrivals, ready: make(chan struct{})}
	l.arrivals++
	l.room.add(w, now)
	l.dispatch(now) // a seat may be free while others wait (the limit just grew)
	bound := l.o.MaxWait
	if l.expirable(w, now) {
		bound = l.o.Target
	}
	l.mu.Unlock()
	return l.wait(ctx, w, bound)
}

// place reports whether a call that must wait has a place in the room: the
// room has space for it, or it goes before the room's worst waiter, which
// it then evicts.
func (l *Limiter) place(c Call, now time.Time) (ok bool, evict *waiter) {
	tag := l.tenants.next(c.Tenant)
	if l.room.len() < l.queueCap(c.Criticality, tag, now) {
		return true, nil
	}
	if w := l.room.worst(); ahead(c.Criticality, tag, w.call.Criticality, w.tag) {
		return true, w
	}
	return false, nil
}

// wait waits for w's outcome, bound or ctx's end: then it leaves the room.
func (l *Limiter) wait(ctx context.Context, w *waiter, bound time.Duration) (*Seat, error) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-w.ready:
		return w.seat, w.err
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.at < 0 { // admitted or shed meanwhile: that outcome stands
		return w.seat, w.err
	}
	now := time.Now()
	l.room.remove(w, now)
	err := ctx.Err()
	if err == nil {
		err = l.refuse(w.call.Criticality, w.tag, QueueTimeout)
	}
	l.dispatch(now)
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
		Limit: lim, InFlight: l.inflight, Queued: l.room.len(), QueueCap: l.queueCap(Sheddable, l.tenants.clock+withinShare+1, now),
		Standing: l.standing(Sheddable, now), Probing: l.g.probing, Alone: l.g.alone, Throughput: l.g.throughput,
		Admitted: l.admitted, Shed: l.shed, ShedBy: l.shedBy, ShedByCheck: l.shedByCheck,
	}
}

func (l *Limiter) grant(c Call, tag int64, now time.Time) *Seat {
	alone := l.inflight == 0
	l.inflight++
	l.grants++
	l.g.granted(l.inflight)
	l.tenants.admitted(tag)
	l.admitted[min(c.Criticality, CriticalPlus)]++
	return &Seat{l: l, start: now, seq: l.grants, alone: alone, class: l.g.classOf(c.Class)}
}

// admits reports whether a call of criticality c may take a seat now:
// CriticalPlus calls have one seat beyond the limit, so that they never
// wait for a less critical call to finish.
func (l *Limiter) admits(c Criticality) bool {
	if c >= CriticalPlus && !l.g.probing {
		return l.g.admits(l.inflight - 1)
	}
	return l.g.admits(l.inflight)
}

// admitsNow reports whether a call of criticality c may take a seat
// without waiting: a seat is free to it and no call that goes before it
// waits.
func (l *Limiter) admitsNow(c Criticality) bool {
	return l.room.waiting(c) == 0 && l.admits(c)
}

// dispatch gives free seats to the best waiters.
func (l *Limiter) dispatch(now time.Time) {
	l.expire(now)
	for l.room.len() > 0 {
		w, head := l.room.best(func(c Criticality) bool { return l.standing(c, now) })
		if !l.admits(w.call.Criticality) {
			return
		}
		// The newest goes in its tenant's place, the lowest tag, and leaves
		// its own to the oldest, now the first to shed.
		w.tag, head.tag = head.tag, w.tag
		l.room.remove(w, now)
		w.seat = l.grant(w.call, w.tag, now)
		close(w.ready)
	}
}

// expire sheds the waiters past Target in a standing queue (CoDel).
func (l *Limiter) expire(now time.Time) {
	if !l.standing(Sheddable, now) {
		return
	}
	for i := l.room.len() - 1; i >= 0; i-- {
		if i < l.room.len() {
			if w := l.room.ws[i]; now.Sub(w.since) > l.o.Target && l.expirable(w, now) {
				l.shedWaiter(w, QueueTimeout, now)
			}
		}
	}
}

// expirable reports whether a waiter is bound by Target rather than
// MaxWait: its criticality's queue is standing and its tenant is past its
// share (a tenant's next calls are not the backlog CoDel sheds: they are
// how a tenant within its share is served).
func (l *Limiter) expirable(w *waiter, now time.Time) bool {
	return l.standing(w.call.Criticality, now) && !l.tenants.within(w.tag)
}

// refuseFull refuses a call the full room has no place for; the call
// counts as its tenant's demand.
func (l *Limiter) refuseFull(c Call) error {
	err := l.refuse(c.Criticality, l.tenants.next(c.Tenant), QueueFull)
	l.tenants.charge(c.Tenant)
	return err
}

func (l *Limiter) shedWaiter(w *waiter, r Reason, now time.Time) {
	l.room.remove(w, now)
	w.err = l.refuse(w.call.Criticality, w.tag, r)
	close(w.ready)
}

// refuse counts a call shed and returns its Refusal; tag is its start tag
// (would-be, for a call never in the room), which tells whether its tenant
// was within its share.
func (l *Limiter) refuse(c Criticality, tag int64, r Reason) error {
	c = min(c, CriticalPlus)
	l.shedBy[r]++
	over := !l.tenants.within(tag)
	if over {
		l.shed[c].OverShare++
	} else {
		l.shed[c].WithinShare++
	}
	return &Refusal{Refusal: overload.Refusal{Criticality: c, RetryAfter: c.RetryAfter(l.o.RetryAfter)}, Reason: r, OverShare: over}
}

// standing reports whether the queue of criticality c or more has stood
// for an Interval.
func (l *Limiter) standing(c Criticality, now time.Time) bool {
	return l.room.standing(c, now, l.o.Interval)
}

// queueCap is how many calls may wait when a call of criticality c with
// start tag tag arrives: what the server drains within MaxWait at its
// recent throughput, or within Target when the call would be backlog
// CoDel sheds (its criticality's queue standing, its tenant past its
// share); at least the limit, at most MaxQueue.
func (l *Limiter) queueCap(c Criticality, tag int64, now time.Time) int {
	bound := l.o.MaxWait
	if l.standing(c, now) && !l.tenants.within(tag) {
		bound = l.o.Target
	}
	lim := int(math.Ceil(l.g.limit))
	n := 4 * lim
	if tp := l.g.throughput; tp > 0 {
		n = int(math.Ceil(tp * bound.Seconds()))
	}
	return max(1, min(l.o.MaxQueue, max(n, lim)))
}
