package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
// costs known) and then its seat releases, in that order, so that a seat
// is not freed before its call's settlement is recorded. Delivered parts
// are removed; what remains waits for another attempt.
type ending struct {
	settles []owedSettle
	seats   []*heldSeat
	// deadline: past it, what remains is dropped; next: the next attempt.
	deadline, next time.Time
	wait           time.Duration
	// counted are the keys the sender counts e under (see sender.keys).
	counted []string
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
func (e *ending) owed() (settles, releases int) { return len(e.settles), len(e.seats) }

// sender delivers what calls owe once they end, off the response path: the
// response is sent while the sender applies the call's settlements and then
// releases its seats. Delivery is at least once (failures are retried with
// backoff for settleRetryFor) and applied once (every settlement carries a
// request id; releasing a seat twice is nothing). Its one goroutine runs
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
	// keys, a seat's key after seatKeyMark), so that a denial on a key
	// with end-of-call work owed can wait for it (waitOwed); passed is
	// closed at the end of every pass of the goroutine.
	keys    map[string]int
	busy    atomic.Bool // running, for a look without the lock
	passed  chan struct{}
	wake    chan struct{}
	stopped chan struct{} // closed when the goroutine ends, nil while none runs
	// clk paces retries and drops (the Limiter's clock).
	clk clock
}

// add queues e for delivery, or, once the sender is closed, delivers it
// once now.
func (q *sender) add(l *Limiter, e *ending) {
	s, r := e.owed()
	if s+r == 0 {
		return
	}
	now := q.clk.now()
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
	e.counted = e.keys()
	q.countLocked(e.counted, 1)
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
		now := q.clk.now()
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
			t := q.clk.afterFunc(q.clk.until(next), q.poke)
			<-q.wake
			t.Stop()
			continue
		}
		before := make([][2]int, len(due))
		for i, e := range due {
			before[i][0], before[i][1] = e.owed()
		}
		l.deliver(context.Background(), due)
		q.settled(l, due, before)
	}
}

// settled takes back the ends of one pass, which owed before[i]
// (settlements, releases) each before it: the delivered parts are no
// longer owed, the rest waits for another attempt or, past its deadline,
// is dropped.
func (q *sender) settled(l *Limiter, due []*ending, before [][2]int) {
	now := q.clk.now()
	var drops, failed []*ending
	q.mu.Lock()
	for i, e := range due {
		s, r := e.owed()
		q.settles -= before[i][0] - s
		q.releases -= before[i][1] - r
		q.countLocked(e.counted, -1)
		e.counted = nil
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
			e.next = now.Add(e.wait)
			e.wait = min(2*e.wait, maxRetryWait)
			q.queue = append(q.queue, e)
			e.counted = e.keys()
			q.countLocked(e.counted, 1)
		}
	}
	if q.passed != nil {
		close(q.passed)
		q.passed = nil
	}
	q.mu.Unlock()
	for _, e := range failed {
		l.log.Warn("rate limit: the store failed the end of a call; retrying", "settlements", len(e.settles), "releases", len(e.seats), "error", e.cause())
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

// seatKeyMark starts the sender's key of a seat release, apart from the
// rate keys of settlements.
const seatKeyMark = "seat\x00"

// keys returns the store keys of what e still owes.
func (e *ending) keys() []string {
	var out []string
	for _, s := range e.settles {
		for _, r := range s.reqs {
			out = append(out, r.Key)
		}
	}
	for _, h := range e.seats {
		out = append(out, seatKeyMark+h.seat.Key)
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
// load while nothing is owed, and a look at the rules when none of them
// leaves work at a call's end.
func (q *sender) owes(checks []*check, denied bool) bool {
	if !q.busy.Load() {
		return false
	}
	ending := false // a rule of checks leaves work at a call's end
	for _, c := range checks {
		ending = ending || c.p.rule.Settle != nil || c.p.inFlight != nil
	}
	return ending && q.owesKeys(checkKeys(checks, denied))
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
		now := q.clk.now()
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
