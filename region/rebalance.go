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

// item is one entry's part in a rebalance.
type item struct {
	e              *entry
	demand, window int64
	used, want     int64
	// held is the share in force when the round began.
	held int64
	// ok: the Home granted.
	ok bool
}

// rebalance measures every entry's demand, drops the entries idle for a
// lease, and runs one round of reports; then a second at once for the
// entries whose fair share moved with what the Home answered, so that a
// change of demand is followed within one interval of being reported.
func (r *Region) rebalance(ctx context.Context) {
	now := time.Now()
	idleReports := int(r.s.lease/r.s.rebalance) + 1
	var items []*item
	r.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		asked := e.asked.Swap(0)
		elapsed := now.Sub(e.since)
		e.since = now
		if asked == 0 {
			e.idle++
		} else {
			e.idle = 0
		}
		if e.idle > idleReports {
			r.entries.Delete(k)
			r.count.Add(-1)
			return true
		}
		it := &item{e: e, demand: e.sh.demandOf(asked, elapsed, r.s.lease)}
		if e.sh.window {
			w, start, end := e.sh.windowAt(now)
			if now.Sub(start) < r.s.skew || end.Sub(now) <= r.s.skew {
				return true // too close to a boundary to know which window the store counts in
			}
			it.window = w
		}
		items = append(items, it)
		return true
	})
	if len(items) == 0 {
		return
	}
	r.round(ctx, items)
	var again []*item
	for _, it := range items {
		if it.ok && moved(it.e.want(it, r.s.lease), it.want) {
			again = append(again, it)
		}
	}
	if len(again) > 0 {
		r.round(ctx, again)
	}
}

// moved reports whether a fair share moved enough to report again at once.
func moved(now, sent int64) bool {
	d := now - sent
	return d > max(1, sent/20) || -d > max(1, sent/20)
}

// want is the share it.e asks for, from its demand and the Home's
// last answer.
func (e *entry) want(it *item, lease time.Duration) int64 {
	if e.sh.window {
		return e.sh.windowWant(it.window, it.demand, it.used, e.others, e.heard(lease))
	}
	return e.sh.rateWant(it.demand, e.others, e.heard(lease))
}

// round reports items to the Home and takes the shares it grants. A share
// asked smaller than the one in force is taken first, and the report waits
// until no decision reads the larger one (at most half an interval; past
// that the report asks the larger one), so the Home never counts less than
// the region may use; a larger one is taken once granted.
func (r *Region) round(ctx context.Context, items []*item) {
	now := time.Now()
	var drains []<-chan struct{}
	var lowered []*item
	ready := items[:0:0]
	for _, it := range items {
		e := it.e
		if e.sh.window {
			var ok bool
			if it.used, ok = r.used(ctx, e, it.window); !ok {
				continue // not reported: the Home must never count less than the region used
			}
		}
		it.want = max(e.want(it, r.s.lease), e.sh.floor)
		cur := e.plan.Load()
		it.held = e.inForce(cur, now, r.s.skew)
		if it.want < it.held {
			drains = append(drains, swap(&e.plan, newPlan(it.want, it.window, cur.until, cur.granted)))
			lowered = append(lowered, it)
		}
		ready = append(ready, it)
	}
	if !waitAll(ctx, drains, r.s.rebalance/2) {
		for _, it := range lowered {
			it.want = it.held
		}
	}
	items, ready = ready, items[:0:0]
	for _, it := range items {
		if it.e.sh.window {
			used, ok := r.used(ctx, it.e, it.window)
			if !ok {
				continue
			}
			it.used = max(it.used, used)
			it.want = max(it.want, it.used)
		}
		ready = append(ready, it)
	}
	items = ready
	if len(items) == 0 {
		return
	}
	reports := make([]Report, len(items))
	for i, it := range items {
		e := it.e
		reports[i] = Report{Key: e.key, Limit: e.sh.limit, Region: r.s.name, Regions: r.s.regions, Floor: e.sh.floor,
			Window: it.window, Demand: it.demand, Used: it.used, Want: it.want, Keep: r.keep(e.sh, now)}
	}
	sent := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, r.s.rebalance)
	replies, err := r.home.Report(callCtx, reports)
	cancel()
	if err != nil {
		r.metrics.reported(len(reports), "error")
		return
	}
	for i, rep := range replies {
		it := items[i]
		if rep.Err != nil {
			r.metrics.reported(1, reportResult(rep.Err))
			continue
		}
		r.metrics.reported(1, "ok")
		it.ok = true
		it.e.others = rep.Others
		if it.e.firstHeard.IsZero() {
			it.e.firstHeard = time.Now()
		}
		it.e.demand.Store(it.demand)
		r.take(ctx, it, rep.Granted, sent)
	}
}

// take makes granted the entry's share, as a lease from sent (a rate) or
// for its window. A larger rate is taken only after the local bucket was
// brought to now under the share in force (one unit, overdrawn): a token
// bucket credits its refill since its last debit at the rate it is asked
// with, and would otherwise earn at the larger rate for a time it held the
// smaller.
func (r *Region) take(ctx context.Context, it *item, granted int64, sent time.Time) {
	e := it.e
	now := time.Now()
	if e.sh.window {
		swap(&e.plan, newPlan(granted, it.window, time.Time{}, now))
		return
	}
	until := sent.Add(r.s.lease - r.s.skew)
	cur := acquire(&e.plan)
	held := e.inForce(cur, now, r.s.skew)
	lim, _ := e.limitAt(cur, now, r.s.skew)
	cur.release()
	if granted > held {
		touch := tollgate.Request{Key: e.key, Limit: lim, Cost: 1, Overdraw: true}
		if _, err := r.local.Allow(ctx, touch); err != nil {
			granted = held // the larger share waits for the next round
		}
	}
	swap(&e.plan, newPlan(granted, 0, until, now))
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

// keep is how long the Home holds a grant made now: the lease (a rate),
// or past the window's end by the skew and a lease (a window).
func (r *Region) keep(sh *shared, now time.Time) time.Duration {
	if !sh.window {
		return r.s.lease
	}
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

// heard reports whether the Home has answered e for at least lease: every
// region that shares it has reported since.
func (e *entry) heard(lease time.Duration) bool {
	return !e.firstHeard.IsZero() && time.Since(e.firstHeard) >= lease
}

// reportResult names a refused report for the metrics.
func reportResult(err error) string {
	if err == ErrStale {
		return "stale"
	}
	return "disagree"
}
