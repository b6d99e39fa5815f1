package region

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
)

// loop renews the shares every rebalance interval until ctx ends.
func (r *Region) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.s.rebalance)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.rebalance(ctx)
		}
	}
}

// item is one entry's part in a round of reports.
type item struct {
	e                    *entry
	demand, window, used int64
	// hold is the largest share a decision may use until the answer is
	// taken: the share in force, or a larger one not yet drained.
	hold int64
	// lowered is the plan a smaller grant replaced, for a second report
	// once no decision reads it.
	lowered *plan
}

// rebalance measures every entry's demand, drops the entries idle for a
// lease (but a window's while the region used more than its floor of it:
// the Home must hear of that use again if it forgets), and runs a round of
// reports; then a second at once for the entries granted less than they
// held, once no decision reads the larger share, so that the Home frees
// the difference within the interval.
func (r *Region) rebalance(ctx context.Context) {
	now := time.Now()
	idleReports := int(r.s.lease/r.s.rebalance) + 1
	var items []*item
	r.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		asked, requests := e.asked.Swap(0), e.requests.Swap(0)
		elapsed := now.Sub(e.since)
		if e.asks.new() {
			elapsed = max(elapsed, r.s.rebalance) // made during the interval: it had the interval to be asked in
		}
		e.since = now
		if asked == 0 {
			e.idle++
		} else {
			e.idle = 0
		}
		it := &item{e: e, demand: e.asks.add(e.sh, sample{asked, requests, elapsed}, r.s.lease, r.s.rebalance)}
		if e.sh.window {
			w, start, end := e.sh.windowAt(now)
			if now.Sub(start) < r.s.skew || end.Sub(now) <= r.s.skew {
				return true // too close to a boundary to know which window the store counts in
			}
			it.window = w
		}
		if e.idle > idleReports && !(e.sh.window && e.lastWindow == it.window && e.lastUsed > e.sh.floor) {
			r.entries.Delete(k)
			r.count.Add(-1)
			return true
		}
		items = append(items, it)
		return true
	})
	if len(items) == 0 {
		return
	}
	lowered := r.round(ctx, items)
	if len(lowered) == 0 {
		return
	}
	drains := make([]<-chan struct{}, len(lowered))
	for i, it := range lowered {
		drains[i] = it.lowered.drained
	}
	if waitAll(ctx, drains, r.s.rebalance/2) {
		r.round(ctx, lowered)
	}
}

// round reports items to the Home and takes what it grants: a larger
// share once granted, a smaller one at once (the Home counts the report's
// hold until it hears the smaller one is all the region may use). It
// returns the items granted less than they held.
func (r *Region) round(ctx context.Context, items []*item) []*item {
	now := time.Now()
	ready := items[:0:0]
	for _, it := range items {
		e := it.e
		if e.sh.window {
			var ok bool
			if it.used, ok = r.used(ctx, e, it.window); !ok {
				continue // not reported: the Home must never count less than the region used
			}
		}
		it.hold = e.holding(now, r.s.skew)
		ready = append(ready, it)
	}
	items = ready
	if len(items) == 0 {
		return nil
	}
	reports := make([]tollgate.Share, len(items))
	for i, it := range items {
		e := it.e
		reports[i] = tollgate.Share{Key: shareKey(e.key, e.sh.limit), Member: r.member, Group: r.s.name,
			Limit: e.sh.limit.Rate, Demand: it.demand, TTL: r.s.lease, Groups: r.s.regions, Floor: e.sh.floor,
			Hold: it.hold, Seq: r.seq.Add(1), Window: it.window}
		if e.sh.window {
			reports[i].Used = it.used
			reports[i].WindowTTL = r.windowKeep(e.sh, now)
		}
	}
	sent := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, r.s.rebalance)
	replies, err := r.home.Share(callCtx, reports)
	cancel()
	if err != nil {
		r.metrics.reported(len(reports), "error")
		return nil
	}
	var lowered []*item
	for i, rep := range replies {
		it := items[i]
		if rep.Refused != nil {
			r.metrics.reported(1, reportResult(rep.Refused))
			continue
		}
		r.metrics.reported(1, "ok")
		it.e.demand.Store(it.demand)
		it.e.lastWindow, it.e.lastUsed = it.window, it.used
		if r.take(ctx, it, rep.Granted, sent) {
			lowered = append(lowered, it)
		}
	}
	return lowered
}

// take makes granted the entry's share, a lease from sent, and reports
// whether it is smaller than the share it held (it.lowered is then the
// plan it replaced). A larger rate is taken only after the local bucket
// was brought to now under the share in force (touch): a token bucket
// credits its refill since its last debit at the rate it is asked with,
// and would otherwise earn at the larger rate for a time it held the
// smaller.
func (r *Region) take(ctx context.Context, it *item, granted int64, sent time.Time) (lower bool) {
	e := it.e
	now := time.Now()
	until := sent.Add(r.s.lease - r.s.skew)
	cur := acquire(&e.plan)
	held := e.inForce(cur, now, r.s.skew)
	lim, _ := e.limitAt(cur, now, r.s.skew)
	cur.release()
	if granted > held && !e.sh.window {
		if err := r.touch(ctx, e, lim); err != nil {
			granted = held // the larger share waits for the next round
		}
	}
	next := newPlan(granted, it.window, until, now)
	old := e.plan.Load()
	swap(&e.plan, next)
	if f := r.trace.Load(); f != nil {
		(*f)(e.key, e.sh.limit, next)
	}
	if granted < held {
		e.lowered, it.lowered = append(e.lowered, old), old
		return true
	}
	return false
}

// touch brings e's bucket on the local store to now under lim, the share
// in force: one unit overdrawn, then given back when the store settles
// (every store of package store does), so that a raise costs the region
// nothing however many processes it runs. The bucket's state then counts
// from now, whichever process decides next.
func (r *Region) touch(ctx context.Context, e *entry, lim tollgate.Limit) error {
	req := tollgate.Request{Key: e.key, Limit: lim, Cost: 1, Overdraw: true}
	d, err := r.local.Allow(ctx, req)
	if err != nil {
		return err
	}
	if st, ok := r.local.(tollgate.Settler); ok {
		req.Overdraw = false
		_, _ = st.Settle(ctx, req, d.Admission(), 0) // on an error the unit stays debited: the bound's one unit a raise
	}
	return nil
}

// holding is the largest share a decision of e may still use: the one in
// force, or one a smaller grant replaced while a decision still reads it
// (and its lease lasts).
func (e *entry) holding(now time.Time, skew time.Duration) int64 {
	h := e.inForce(e.plan.Load(), now, skew)
	undrained := e.lowered[:0]
	for _, p := range e.lowered {
		select {
		case <-p.drained:
		default:
			h = max(h, e.inForce(p, now, skew))
			undrained = append(undrained, p)
		}
	}
	clear(e.lowered[len(undrained):])
	e.lowered = undrained
	return h
}

// used reads how many units this region admitted in window, from the
// local store; ok is false when it cannot tell (the store failed, or
// counts in another window).
func (r *Region) used(ctx context.Context, e *entry, window int64) (n int64, ok bool) {
	all := e.sh.limit // a window of the whole limit: Remaining is what the region has not used of it
	d, err := r.local.Peek(ctx, tollgate.Request{Key: e.key, Limit: all})
	if err != nil || d.At.IsZero() {
		return 0, false
	}
	if w, _, _ := e.sh.windowAt(d.At); w != window {
		return 0, false
	}
	return all.Rate - d.Remaining, true
}

// windowKeep is how long the Home keeps a region's use of the window of
// now: past the window's end by the skew and a lease, the longest a
// process may still count in it.
func (r *Region) windowKeep(sh *shared, now time.Time) time.Duration {
	_, _, end := sh.windowAt(now)
	return end.Sub(now) + r.s.skew + r.s.lease
}

// waitAll waits until every channel is closed, ctx ends or d passes; it
// reports whether every channel closed.
func waitAll(ctx context.Context, chans []<-chan struct{}, d time.Duration) bool {
	if len(chans) == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range chans {
		select {
		case <-c:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// reportResult names a refused report for the metrics.
func reportResult(err error) string {
	switch err {
	case tollgate.ErrShareStale:
		return "stale"
	case tollgate.ErrShareLate:
		return "late"
	}
	return "disagree"
}
