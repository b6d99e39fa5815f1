package interceptor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
)

// End-of-call delivery.
const (
	// settleRetryFor is how long a call's end-of-call work the store could
	// not take is retried, with backoff, before it is dropped.
	settleRetryFor = 10 * time.Second
	// maxOwed bounds the settlements and releases waiting in the sender;
	// past it a call's end-of-call work is dropped at once.
	maxOwed = 10_000
	// sendBatch is the most calls' ends one pass of the sender delivers.
	sendBatch = 256
	// firstRetry is the wait before the second attempt; it doubles up to
	// maxRetryWait.
	firstRetry, maxRetryWait = 10 * time.Millisecond, time.Second
)

// ending is what one call owes once it ended: its settlements (final
// costs known) and then its slot releases, in that order, so that a slot
// is not freed before its call's settlement is recorded. Delivered parts
// are removed; what remains waits for another attempt.
type ending struct {
	settles []owedSettle
	slots   []*heldSlot
	// deadline: past it, what remains is dropped; next: the next attempt.
	deadline, next time.Time
	wait           time.Duration
}

// owedSettle is a settlement with its final cost, and the outcome of its
// latest attempt.
type owedSettle struct {
	settlement
	cost    int64
	applied bool
	err     error
}

// owed counts e's settlements and releases.
func (e *ending) owed() (settles, releases int) { return len(e.settles), len(e.slots) }

// sender delivers what calls owe once they end, off the response path: the
// response is sent while the sender applies the call's settlements and then
// releases its slots. Delivery is at least once (failures are retried with
// backoff for settleRetryFor) and applied once (every settlement carries a
// request id; releasing a slot twice is nothing). Its one goroutine runs
// only while something is owed; Close drains it. Memory is bounded by
// maxOwed, and everything dropped is logged and counted.
type sender struct {
	mu       sync.Mutex
	queue    []*ending
	settles  int    // settlements owed: queued and in delivery
	releases int    // releases owed, likewise
	running  bool   // the goroutine runs
	draining bool   // Close waits: retry until its ctx ends, not settleRetryFor
	closed   bool   // Close returned or gave up: deliver inline, once
	lost     [2]int // settlements and releases dropped because Close gave up
	// keys counts what is owed by store key (a settlement's requests'
	// keys, a slot's key after slotKeyMark), so that a denial on a key
	// with end-of-call work owed can wait for it (waitOwed); passed is
	// closed at the end of every pass of the goroutine.
	keys    map[string]int
	busy    atomic.Bool // running, for a look without the lock
	passed  chan struct{}
	wake    chan struct{}
	stopped chan struct{} // closed when the goroutine ends, nil while none runs
}

// add queues e for delivery, or, once the sender is closed, delivers it
// once now.
func (q *sender) add(l *Limiter, e *ending) {
	s, r := e.owed()
	if s+r == 0 {
		return
	}
	now := time.Now()
	e.deadline, e.next, e.wait = now.Add(settleRetryFor), now, firstRetry
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		l.deliver(context.Background(), []*ending{e})
		l.drop(e, "the limiter is closed")
		return
	}
	if q.settles+q.releases+s+r > maxOwed {
		q.mu.Unlock()
		l.drop(e, "too many settlements and releases wait for the store")
		return
	}
	q.queue = append(q.queue, e)
	q.settles += s
	q.releases += r
	q.countLocked(e.keys(), 1)
	if !q.running {
		q.running = true
		q.busy.Store(true)
		if q.wake == nil {
			q.wake = make(chan struct{}, 1)
		}
		q.stopped = make(chan struct{})
		go q.run(l, q.stopped)
	}
	q.mu.Unlock()
	q.poke()
}

// poke wakes the goroutine, if one waits.
func (q *sender) poke() {
	q.mu.Lock()
	wake := q.wake
	q.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// run delivers what is due until nothing is owed.
func (q *sender) run(l *Limiter, stopped chan struct{}) {
	defer close(stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		if q.closed && len(q.queue) > 0 { // Close gave up
			drops := q.queue
			q.queue = nil
			q.lost[0] += q.settles
			q.lost[1] += q.releases
			q.settles, q.releases, q.keys = 0, 0, nil
			q.mu.Unlock()
			for _, e := range drops {
				l.drop(e, "Close ended before the store took it")
			}
			continue
		}
		if len(q.queue) == 0 {
			q.running = false
			q.busy.Store(false)
			if q.passed != nil {
				close(q.passed)
				q.passed = nil
			}
			q.mu.Unlock()
			return
		}
		now := time.Now()
		var due []*ending
		next := now.Add(maxRetryWait)
		keep := q.queue[:0]
		for _, e := range q.queue {
			if len(due) < sendBatch && !now.Before(e.next) {
				due = append(due, e)
			} else {
				keep = append(keep, e)
				next = minTime(next, e.next)
			}
		}
		clear(q.queue[len(keep):])
		q.queue = keep
		q.mu.Unlock()
		if len(due) == 0 {
			timer.Reset(time.Until(next))
			select {
			case <-timer.C:
			case <-q.wake:
				if !timer.Stop() {
					<-timer.C
				}
			}
			continue
		}
		before := make([][2]int, len(due))
		keys := make([][]string, len(due))
		for i, e := range due {
			before[i][0], before[i][1] = e.owed()
			keys[i] = e.keys()
		}
		l.deliver(context.Background(), due)
		q.settled(l, due, before, keys)
	}
}

// settled takes back the ends of one pass, which owed before[i]
// (settlements, releases) each before it: the delivered parts are no
// longer owed, the rest waits for another attempt or, past its deadline,
// is dropped.
func (q *sender) settled(l *Limiter, due []*ending, before [][2]int, keys [][]string) {
	now := time.Now()
	var drops, failed []*ending
	q.mu.Lock()
	for i, e := range due {
		s, r := e.owed()
		q.settles -= before[i][0] - s
		q.releases -= before[i][1] - r
		q.countLocked(keys[i], -1)
		switch {
		case s+r == 0:
		case now.After(e.deadline) && !q.draining && !q.closed:
			q.settles -= s
			q.releases -= r
			drops = append(drops, e)
		default:
			if e.wait == firstRetry {
				failed = append(failed, e)
			}
			e.wait = min(2*e.wait, maxRetryWait)
			e.next = now.Add(e.wait)
			q.queue = append(q.queue, e)
			q.countLocked(e.keys(), 1)
		}
	}
	if q.passed != nil {
		close(q.passed)
		q.passed = nil
	}
	q.mu.Unlock()
	for _, e := range failed {
		l.log.Warn("rate limit: the store failed the end of a call; retrying", "settlements", len(e.settles), "releases", len(e.slots), "error", e.cause())
	}
	for _, e := range drops {
		l.drop(e, "the store failed for too long")
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// deliver makes one attempt at every end of ends under ctx: the shared
// store's settlements of them all together (SettleAll, at most
// tollgate.MaxAllowAll requests per call), the local store's one by one,
// and then, concurrently, the slot releases of the ends whose settlements
// were all applied. What was delivered is removed from its end.
func (l *Limiter) deliver(ctx context.Context, ends []*ending) {
	rest := ends
	if ss, ok := l.store.(tollgate.SlotSettler); ok {
		rest = l.finishTogether(ctx, ss, ends)
	}
	var shared []*owedSettle
	for _, e := range rest {
		for i := range e.settles {
			s := &e.settles[i]
			if s.local {
				s.applied = l.callSettle(ctx, []*owedSettle{s}) == nil
			} else {
				shared = append(shared, s)
			}
		}
	}
	for len(shared) > 0 {
		n, size := 0, 0
		for n < len(shared) && size+len(shared[n].reqs) <= tollgate.MaxAllowAll {
			size += len(shared[n].reqs)
			n++
		}
		n = max(n, 1)
		l.settleShared(ctx, shared[:n])
		shared = shared[n:]
	}
	var wg sync.WaitGroup
	for _, e := range ends {
		e.settles = l.keepUnapplied(e.settles)
		if len(e.settles) > 0 {
			continue // its slots wait for its settlements
		}
		for _, h := range e.slots {
			if !h.released {
				wg.Go(func() { h.released = h.release(ctx) })
			}
		}
	}
	wg.Wait()
	for _, e := range ends {
		kept := e.slots[:0]
		for _, h := range e.slots {
			if !h.released {
				kept = append(kept, h)
			}
		}
		clear(e.slots[len(kept):])
		e.slots = kept
	}
}

// finishTogether delivers the ends whose settlements and slots are all on
// the shared store st in SettleAllAndRelease calls (one script call each
// on a single node), as many ends per call as tollgate.MaxAllowAll
// requests allow, and returns the other ends. When the store refuses a
// call's set as invalid, its ends go one by one.
func (l *Limiter) finishTogether(ctx context.Context, st tollgate.SlotSettler, ends []*ending) []*ending {
	var rest, together []*ending
	for _, e := range ends {
		if e.shared() {
			together = append(together, e)
		} else {
			rest = append(rest, e)
		}
	}
	for len(together) > 0 {
		n, size := 0, 0
		for n < len(together) && size+together[n].requests() <= tollgate.MaxAllowAll {
			size += together[n].requests()
			n++
		}
		n = max(n, 1)
		l.finish(ctx, st, together[:n])
		together = together[n:]
	}
	return rest
}

// finish makes one SettleAllAndRelease call of ends under the store
// policy, and records its outcome in them.
func (l *Limiter) finish(ctx context.Context, st tollgate.SlotSettler, ends []*ending) {
	var reqs []tollgate.Request
	var decs []tollgate.Decision
	var costs []int64
	var slots []tollgate.Slot
	for _, e := range ends {
		for _, s := range e.settles {
			reqs = append(reqs, s.reqs...)
			decs = append(decs, s.decs...)
			for range s.reqs {
				costs = append(costs, s.cost)
			}
		}
		for _, h := range e.slots {
			slots = append(slots, h.slot)
		}
	}
	_, _, err := l.calls.Do(ctx, func(ctx context.Context) error {
		_, err := st.SettleAllAndRelease(ctx, reqs, decs, costs, slots)
		return err
	})
	if errors.Is(err, tollgate.ErrInvalidRequest) && len(ends) > 1 {
		for _, e := range ends {
			l.finish(ctx, st, []*ending{e})
		}
		return
	}
	for _, e := range ends {
		for i := range e.settles {
			e.settles[i].applied, e.settles[i].err = err == nil, err
		}
		for _, h := range e.slots {
			h.released, h.err = err == nil, err
			if err == nil {
				l.recordSlot(ctx, h.p, slotReleased)
			}
		}
	}
}

// shared reports whether everything e owes is owed to the shared store.
func (e *ending) shared() bool {
	for _, s := range e.settles {
		if s.local {
			return false
		}
	}
	for _, h := range e.slots {
		if h.local {
			return false
		}
	}
	return true
}

// requests counts the store requests of e's settlements.
func (e *ending) requests() int {
	n := 0
	for _, s := range e.settles {
		n += len(s.reqs)
	}
	return n
}

// settleShared applies settlements on the shared store in one SettleAll
// call under the store policy; when the store refuses the set as invalid,
// each alone, so that one bad settlement does not hold the others.
func (l *Limiter) settleShared(ctx context.Context, ss []*owedSettle) {
	_, _, err := l.calls.Do(ctx, func(ctx context.Context) error { return l.callSettle(ctx, ss) })
	if errors.Is(err, tollgate.ErrInvalidRequest) && len(ss) > 1 {
		for _, s := range ss {
			l.settleShared(ctx, []*owedSettle{s})
		}
		return
	}
	for _, s := range ss {
		s.applied, s.err = err == nil, err
	}
}

// callSettle sends settlements, all on one store, as one Settle or
// SettleAll call.
func (l *Limiter) callSettle(ctx context.Context, ss []*owedSettle) error {
	st := ss[0].st
	if len(ss) == 1 && len(ss[0].reqs) == 1 {
		_, err := st.Settle(ctx, ss[0].reqs[0], ss[0].decs[0], ss[0].cost)
		return err
	}
	var reqs []tollgate.Request
	var decs []tollgate.Decision
	var costs []int64
	for _, s := range ss {
		reqs = append(reqs, s.reqs...)
		decs = append(decs, s.decs...)
		for range s.reqs {
			costs = append(costs, s.cost)
		}
	}
	_, err := st.SettleAll(ctx, reqs, decs, costs)
	return err
}

// keepUnapplied records the outcome of the latest attempt at ss and
// returns those not applied.
func (l *Limiter) keepUnapplied(ss []owedSettle) []owedSettle {
	kept := ss[:0]
	for _, s := range ss {
		if s.applied {
			l.recordSettle(context.Background(), s.p, s.reserved, s.cost, settleApplied)
			continue
		}
		l.recordSettle(context.Background(), s.p, s.reserved, s.cost, settleRetried)
		kept = append(kept, s)
	}
	clear(ss[len(kept):])
	return kept
}

// cause is the latest error a settlement of e met, or the release's.
func (e *ending) cause() error {
	for _, s := range e.settles {
		if s.err != nil {
			return s.err
		}
	}
	for _, h := range e.slots {
		if h.err != nil {
			return h.err
		}
	}
	return nil
}

// drop gives up what e still owes, logging and counting every settlement
// (with its units) and every release (the slot expires by itself).
func (l *Limiter) drop(e *ending, why string) {
	ctx := context.Background()
	for _, s := range e.settles {
		l.recordSettle(ctx, s.p, s.reserved, s.cost, settleDropped)
		l.log.Error("rate limit settle: dropped: "+why+"; the reservation stands",
			"rule", s.p.rule.Name, "reserved", s.reserved, "cost", s.cost, "error", s.err)
	}
	for _, h := range e.slots {
		l.recordSlot(ctx, h.p, slotReleaseFailed)
		l.log.Warn("rate limit: an in-flight slot release dropped: "+why+"; it expires by itself",
			"rule", h.p.rule.Name, "ttl", h.slot.TTL, "error", h.err)
	}
}

// slotKeyMark starts the sender's key of a slot release, apart from the
// rate keys of settlements.
const slotKeyMark = "slot\x00"

// keys returns the store keys of what e still owes.
func (e *ending) keys() []string {
	var out []string
	for _, s := range e.settles {
		for _, r := range s.reqs {
			out = append(out, r.Key)
		}
	}
	for _, h := range e.slots {
		out = append(out, slotKeyMark+h.slot.Key)
	}
	return out
}

// countLocked adds delta to the count of each key.
func (q *sender) countLocked(keys []string, delta int) {
	if len(keys) == 0 {
		return
	}
	if q.keys == nil {
		q.keys = make(map[string]int)
	}
	for _, k := range keys {
		if n := q.keys[k] + delta; n > 0 {
			q.keys[k] = n
		} else {
			delete(q.keys, k)
		}
	}
}

// owes reports whether the sender owes end-of-call work on the keys of
// checks (only the denied ones' when denied is set). It costs one atomic
// load while nothing is owed.
func (q *sender) owes(checks []*check, denied bool) bool {
	if !q.busy.Load() {
		return false
	}
	return q.owesKeys(checkKeys(checks, denied))
}

// owesKeys reports whether the sender owes end-of-call work on one of keys.
func (q *sender) owesKeys(keys []string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range keys {
		if q.keys[k] > 0 {
			return true
		}
	}
	return false
}

// waitOwed waits, within ctx, until nothing is owed on keys (nil: on any
// key), asking the goroutine to deliver at once what is queued. It
// returns nil once nothing is owed on them, else ctx's error.
func (q *sender) waitOwed(ctx context.Context, keys []string) error {
	for {
		q.mu.Lock()
		owed := keys == nil && q.settles+q.releases > 0
		for _, k := range keys {
			if q.keys[k] > 0 {
				owed = true
				break
			}
		}
		if !owed || !q.running {
			q.mu.Unlock()
			return nil
		}
		now := time.Now()
		for _, e := range q.queue {
			e.next = minTime(e.next, now)
		}
		if q.passed == nil {
			q.passed = make(chan struct{})
		}
		passed := q.passed
		q.mu.Unlock()
		q.poke()
		select {
		case <-passed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
