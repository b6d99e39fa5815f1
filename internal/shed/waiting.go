package shed

import "time"

// waiter is a call waiting for a seat. Its outcome (seat or err) is set
// under the Limiter's lock before ready is closed.
type waiter struct {
	call  Call
	tag   int64 // start tag in fair queueing order
	since time.Time
	seq   uint64 // arrival order
	at    int    // index in room.ws; -1 once out
	ready chan struct{}
	seat  *Seat
	err   error
}

// room is the waiting room. It is small (the Limiter bounds it by what the
// server drains within MaxWait), so best and worst scan it: the order is
// criticality first, then the tenant's fair-queueing rank, then arrival.
//
// A standing queue is judged per criticality: the calls of criticality c
// or more have not all been gone at once for an Interval. The most
// critical calls are served first, so their queue empties while the
// least critical stand; only those get CoDel's short Target and LIFO.
type room struct {
	ws    []*waiter
	n     [Levels]int       // waiters by criticality
	empty [Levels]time.Time // the last time no waiter of criticality c or more was here
}

func newRoom(now time.Time) room {
	var r room
	for c := range r.empty {
		r.empty[c] = now
	}
	return r
}

func (r *room) len() int { return len(r.ws) }

func (r *room) add(w *waiter, now time.Time) {
	r.touch(now)
	w.at = len(r.ws)
	r.ws = append(r.ws, w)
	r.n[min(w.call.Criticality, CriticalPlus)]++
}

func (r *room) remove(w *waiter, now time.Time) {
	last := len(r.ws) - 1
	r.ws[w.at] = r.ws[last]
	r.ws[w.at].at = w.at
	r.ws[last] = nil
	r.ws = r.ws[:last]
	w.at = -1
	r.n[min(w.call.Criticality, CriticalPlus)]--
	r.touch(now)
}

// touch notes now as a time the queue of each criticality was empty, for
// the criticalities it is empty for.
func (r *room) touch(now time.Time) {
	above := 0
	for c := CriticalPlus; ; c-- {
		above += r.n[c]
		if above == 0 {
			r.empty[c] = now
		}
		if c == 0 {
			return
		}
	}
}

// waiting counts the waiters of criticality c or more.
func (r *room) waiting(c Criticality) int {
	n := 0
	for d := min(c, CriticalPlus); d <= CriticalPlus; d++ {
		n += r.n[d]
	}
	return n
}

// standing reports whether the calls of criticality c or more have stood
// in the room, never all gone, for more than interval.
func (r *room) standing(c Criticality, now time.Time, interval time.Duration) bool {
	return r.waiting(c) > 0 && now.Sub(r.empty[min(c, CriticalPlus)]) > interval
}

// ahead reports whether a call of criticality c with start tag tag goes
// before one of criticality d with start tag dtag.
func ahead(c Criticality, tag int64, d Criticality, dtag int64) bool {
	if c != d {
		return c > d
	}
	return tag < dtag
}

// best is the waiter to admit next: the most critical, then the tenant
// whose lowest start tag is lowest; of that tenant's calls of that
// criticality, the newest when lifo (its criticality's queue is standing,
// so the oldest are the likeliest to be given up by their callers), or
// else the oldest; and the tenant's head, its call with the lowest tag.
// The room is never empty when best is called.
func (r *room) best(lifo func(Criticality) bool) (b, head *waiter) {
	for _, w := range r.ws {
		if head == nil || ahead(w.call.Criticality, w.tag, head.call.Criticality, head.tag) ||
			(w.call.Criticality == head.call.Criticality && w.tag == head.tag && w.seq < head.seq) {
			head = w
		}
	}
	if !lifo(head.call.Criticality) {
		return head, head
	}
	b = head
	for _, w := range r.ws {
		if w.call == head.call && w.seq > b.seq {
			b = w
		}
	}
	return b, head
}

// worst is the waiter to shed first: the least critical, then the tenant
// with the highest start tag, then the oldest (the nearest its caller's deadline).
func (r *room) worst() *waiter {
	var b *waiter
	for _, w := range r.ws {
		if b == nil || ahead(b.call.Criticality, b.tag, w.call.Criticality, w.tag) ||
			(w.call.Criticality == b.call.Criticality && w.tag == b.tag && w.seq < b.seq) {
			b = w
		}
	}
	return b
}
