package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/tollgate/tollgate"
)

// Delivery: one attempt at what calls owe once they end (see sender).

// deliver makes one attempt at every end of ends under ctx: the shared
// store's settlements of them all together (SettleAll, at most
// tollgate.MaxAllowAll requests per call), the local store's one by one,
// and then, concurrently, the seat releases of the ends whose settlements
// were all applied. What was delivered is removed from its end.
func (l *Limiter) deliver(ctx context.Context, ends []*ending) {
	rest := ends
	if ss, ok := l.store.(tollgate.SeatSettler); ok {
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
			continue // its seats wait for its settlements
		}
		for _, h := range e.seats {
			if !h.released {
				wg.Go(func() { h.released = h.release(ctx) })
			}
		}
	}
	wg.Wait()
	for _, e := range ends {
		kept := e.seats[:0]
		for _, h := range e.seats {
			if !h.released {
				kept = append(kept, h)
			}
		}
		clear(e.seats[len(kept):])
		e.seats = kept
	}
}

// finishTogether delivers the ends whose settlements and seats are all on
// the shared store st in SettleAllAndRelease calls (one script call each
// on a single node), as many ends per call as tollgate.MaxAllowAll
// requests allow, and returns the other ends. When the store refuses a
// call's set as invalid, its ends go one by one.
func (l *Limiter) finishTogether(ctx context.Context, st tollgate.SeatSettler, ends []*ending) []*ending {
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
func (l *Limiter) finish(ctx context.Context, st tollgate.SeatSettler, ends []*ending) {
	var reqs []tollgate.Request
	var adms []tollgate.Admission
	var costs []int64
	var seats []tollgate.Seat
	for _, e := range ends {
		for _, s := range e.settles {
			reqs = append(reqs, s.reqs...)
			adms = append(adms, s.adms...)
			for range s.reqs {
				costs = append(costs, s.cost)
			}
		}
		for _, h := range e.seats {
			seats = append(seats, h.seat)
		}
	}
	_, _, err := l.calls.Do(ctx, func(ctx context.Context) error {
		_, err := st.SettleAllAndRelease(ctx, reqs, adms, costs, seats)
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
		for _, h := range e.seats {
			h.released, h.err = err == nil, err
			if err == nil {
				l.recordSeat(ctx, h.p, seatReleased)
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
	for _, h := range e.seats {
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
		_, err := st.Settle(ctx, ss[0].reqs[0], ss[0].adms[0], ss[0].cost)
		return err
	}
	var reqs []tollgate.Request
	var adms []tollgate.Admission
	var costs []int64
	for _, s := range ss {
		reqs = append(reqs, s.reqs...)
		adms = append(adms, s.adms...)
		for range s.reqs {
			costs = append(costs, s.cost)
		}
	}
	_, err := st.SettleAll(ctx, reqs, adms, costs)
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
	for _, h := range e.seats {
		if h.err != nil {
			return h.err
		}
	}
	return nil
}

// drop gives up what e still owes, logging and counting every settlement
// (with its units) and every release (the seat expires by itself).
func (l *Limiter) drop(e *ending, why string) {
	ctx := context.Background()
	for _, s := range e.settles {
		l.recordSettle(ctx, s.p, s.reserved, s.cost, settleDropped)
		l.log.Error("rate limit settle: dropped: "+why+"; the reservation stands",
			"rule", s.p.rule.Name, "reserved", s.reserved, "cost", s.cost, "error", s.err)
	}
	for _, h := range e.seats {
		l.recordSeat(ctx, h.p, seatReleaseFailed)
		l.log.Warn("rate limit: an in-flight seat release dropped: "+why+"; it expires by itself",
			"rule", h.p.rule.Name, "ttl", h.seat.TTL, "error", h.err)
	}
}
