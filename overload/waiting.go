package overload

import "time"

// waiter is a call waiting for a seat. Its outcome (seat or err) is set
// under the Limiter's lock before ready is closed.
type waiter struct {
	call  Call
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
type room struct {
	ws []*waiter
}

func (r *room) len() int { return len(r.ws) }

func (r *room) add(w *waiter) {
	w.at = len(r.ws)
	r.ws = append(r.ws, w)
}

func (r *room) remove(w *waiter) {
	last := len(r.ws) - 1
	r.ws[w.at] = r.ws[last]
	r.ws[w.at].at = w.at
	r.ws[last] = nil
	r.ws = r.ws[:last]
	w.at = -1
}

// ahead reports whether a call of criticality c from a tenant ranked rank
// goes before one of criticality d ranked drank.
func ahead(c Criticality, rank int64, d Criticality, drank int64) bool {
	if c != d {
		return c > d
	}
	return rank < drank
}

// best is the waiter to admit next: the most critical, then the tenant
// served least, then the newest when lifo (a standing queue) or the oldest.
func (r *room) best(t *tenants, lifo bool) *waiter {
	var b *waiter
	var brank int64
	for _, w := range r.ws {
		rank := t.rank(w.call.Tenant)
		if b == nil || ahead(w.call.Criticality, rank, b.call.Criticality, brank) ||
			(w.call.Criticality == b.call.Criticality && rank == brank && (w.seq > b.seq) == lifo) {
			b, brank = w, rank
		}
	}
	return b
}

// worst is the waiter to shed first: the least critical, then the tenant
// served most, then the oldest (the nearest its caller's deadline).
func (r *room) worst(t *tenants) (*waiter, int64) {
	var b *waiter
	var brank int64
	for _, w := range r.ws {
		rank := t.rank(w.call.Tenant)
		if b == nil || ahead(b.call.Criticality, brank, w.call.Criticality, rank) ||
			(w.call.Criticality == b.call.Criticality && rank == brank && w.seq < b.seq) {
			b, brank = w, rank
		}
	}
	return b, brank
}
