package region

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/admitlog"
)

// world is several regions sharing one Home, each deciding on its own
// store and run by one or more processes (each its own Region on the
// region's store), and what they asked and admitted under each limit.
type world struct {
	t       *testing.T
	regions [][]*Region // by region, its processes
	names   []string

	stop    chan struct{}
	drivers sync.WaitGroup

	mu       sync.Mutex
	admitted map[tollgate.Limit]*admitlog.Log
	asked    map[tollgate.Limit]*admitlog.Log
	plans    map[planOf][]*plan // every plan each process took, in order
}

// planOf names the plans of one process for one identity and limit.
type planOf struct {
	r   *Region
	key string
	l   tollgate.Limit
}

// part is one process of a region: its store (the region's) and its
// connection to the Home.
type part struct {
	local tollgate.Store
	home  Home
}

// newWorld starts one Region per store, named r0, r1, ..., on home, with
// c's tuning (its Region and Regions are set here). They are closed when
// the test ends.
func newWorld(t *testing.T, home Home, stores []tollgate.Store, c Config) *world {
	t.Helper()
	parts := make([][]part, len(stores))
	for i, st := range stores {
		parts[i] = []part{{st, home}}
	}
	return newProcesses(t, parts, c)
}

// newProcesses starts, for region i, one Region (process) per part of
// parts[i]: as many processes as the region runs, each with its own
// connections.
func newProcesses(t *testing.T, parts [][]part, c Config) *world {
	t.Helper()
	w := &world{t: t, stop: make(chan struct{}), admitted: map[tollgate.Limit]*admitlog.Log{}, asked: map[tollgate.Limit]*admitlog.Log{},
		plans: map[planOf][]*plan{}}
	for i := range parts {
		w.names = append(w.names, fmt.Sprint("r", i))
	}
	t.Cleanup(w.close)
	for i, ps := range parts {
		c.Region, c.Regions = w.names[i], w.names
		var procs []*Region
		for _, p := range ps {
			r, err := New(p.local, p.home, c)
			if err != nil {
				t.Fatal(err)
			}
			trace := func(key string, l tollgate.Limit, p *plan) {
				w.mu.Lock()
				defer w.mu.Unlock()
				k := planOf{r, key, l}
				w.plans[k] = append(w.plans[k], p)
			}
			r.trace.Store(&trace)
			procs = append(procs, r)
		}
		w.regions = append(w.regions, procs)
	}
	return w
}

func (w *world) close() {
	for _, procs := range w.regions {
		for _, r := range procs {
			if err := r.Close(context.Background()); err != nil {
				w.t.Errorf("close: %v", err)
			}
		}
	}
}

// logs returns the logs of what was admitted and asked under l.
func (w *world) logs(l tollgate.Limit) (admitted, asked *admitlog.Log) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.admitted[l] == nil {
		w.admitted[l], w.asked[l] = &admitlog.Log{}, &admitlog.Log{}
	}
	return w.admitted[l], w.asked[l]
}

// drive starts asking region i for cost units of key under l every
// period until its stop is closed or halt, recording what is admitted:
// spread over its processes, each asking every period × processes.
func (w *world) drive(i int, key string, l tollgate.Limit, cost int64, period time.Duration, stop <-chan struct{}) {
	procs := w.regions[i]
	for _, r := range procs {
		w.drivers.Go(func() {
			for w.running(stop) {
				w.ask(i, r, key, l, cost)
				time.Sleep(period * time.Duration(len(procs)))
			}
		})
	}
}

// pace starts asking region i for cost units of key under l perSecond
// times a second, on time, until its stop is closed or halt: one stream of
// requests dealt to its processes in turn, as a load balancer would.
func (w *world) pace(i int, key string, l tollgate.Limit, cost int64, perSecond float64, stop <-chan struct{}) {
	procs := w.regions[i]
	for j, r := range procs {
		w.drivers.Go(func() {
			start, asked := time.Now(), 0
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for w.running(stop) {
				due := dealt(time.Since(start).Seconds()*perSecond, j, len(procs))
				for ; asked < due && w.running(stop); asked++ {
					w.ask(i, r, key, l, cost)
				}
				select {
				case <-tick.C:
				case <-stop:
				case <-w.stop:
				}
			}
		})
	}
}

// dealt is how many of the first n requests of a stream dealt in turn to
// procs processes went to process j.
func dealt(n float64, j, procs int) int {
	if n < float64(j) {
		return 0
	}
	return int((n-float64(j))/float64(procs)) + 1
}

// running reports whether neither stop nor the world's stop is closed.
func (w *world) running(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return false
	case <-w.stop:
		return false
	default:
		return true
	}
}

// ask makes one request of region i's process r, recording it.
func (w *world) ask(i int, r *Region, key string, l tollgate.Limit, cost int64) {
	admitted, asked := w.logs(l)
	asked.Add(i, time.Now(), cost)
	d, err := r.Allow(context.Background(), tollgate.Request{Key: key, Limit: l, Cost: cost})
	if err != nil {
		w.t.Errorf("region %d: %v", i, err)
		return
	}
	if d.Allowed {
		at := d.At // the store's clock, one for every store of a test
		if at.IsZero() {
			at = time.Now()
		}
		admitted.Add(i, at, cost)
	}
}

// halt stops every driver and waits for them.
func (w *world) halt() {
	close(w.stop)
	w.drivers.Wait()
}

// the log of the only limit driven, for the tests that drive one.
func (w *world) only() *admitlog.Log {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.admitted) != 1 {
		w.t.Fatalf("%d limits driven, want one", len(w.admitted))
	}
	for _, l := range w.admitted {
		return l
	}
	return nil
}

// between sums what region i (-1: every region) admitted in [from, to)
// under the only limit driven.
func (w *world) between(i int, from, to time.Time) int64 { return w.only().Units(i, from, to) }

// rate is what region i (-1: every region) admitted per second in [from,
// to) under the only limit driven.
func (w *world) rate(i int, from, to time.Time) float64 { return w.only().Rate(i, from, to) }

// checkEnvelope checks that, over every span of each length in spans
// ending at an admission, the regions together admitted at most what one
// token bucket of l admits (its burst and the rate over the span), plus
// slack units.
func (w *world) checkEnvelope(l tollgate.Limit, slack int64, spans ...time.Duration) {
	w.t.Helper()
	admitted, _ := w.logs(l)
	for _, span := range spans {
		s := admitted.Worst(l, span)
		if s.Units > s.Allowed+slack {
			w.t.Errorf("over %s the regions admitted %d (%v by region), more than %s allows (%d) plus %d", span, s.Units, s.ByRegion, l, s.Allowed, slack)
		} else {
			w.t.Logf("over %s at most %d admitted of %d allowed (+%d)", span, s.Units, s.Allowed, slack)
		}
	}
}

// checkWindows checks that every window of l (numbered as the stores
// number them) in [from, to) admitted at most its units, the regions
// together.
func (w *world) checkWindows(l tollgate.Limit, from, to time.Time) {
	w.t.Helper()
	admitted, _ := w.logs(l)
	p := l.Period.Microseconds()
	worst := int64(0)
	for n := from.UnixMicro() / p; n*p < to.UnixMicro(); n++ {
		got := admitted.Units(-1, time.UnixMicro(n*p), time.UnixMicro((n+1)*p))
		worst = max(worst, got)
		if got > l.Rate {
			w.t.Errorf("window %d admitted %d, more than %d", n, got, l.Rate)
			for i := range w.regions {
				from, to := time.UnixMicro(n*p), time.UnixMicro((n+1)*p)
				w.t.Logf("r%d admitted %d, %d of them in the window's first 150ms, %d in its last", i, admitted.Units(i, from, to),
					admitted.Units(i, from, from.Add(150*time.Millisecond)), admitted.Units(i, to.Add(-150*time.Millisecond), to))
			}
		}
	}
	w.t.Logf("at most %d of %d admitted in a window", worst, l.Rate)
}

// slack is the N·k of the bound: one unit per process per raise of its
// share, at most one raise per process per rebalance over d.
func (w *world) slack(d, rebalance time.Duration) int64 {
	n := 0
	for _, procs := range w.regions {
		n += len(procs)
	}
	return int64(n) * int64(d/rebalance+1)
}

// cutHome is a Home whose link from some regions is cut: their reports
// wait until the call's deadline and fail, as over a link that drops
// every packet.
type cutHome struct {
	Home
	mu  sync.Mutex
	cut map[string]bool
}

func (h *cutHome) setCut(region string, cut bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut == nil {
		h.cut = map[string]bool{}
	}
	h.cut[region] = cut
}

func (h *cutHome) Share(ctx context.Context, reports []tollgate.Share) ([]tollgate.ShareGrant, error) {
	h.mu.Lock()
	cut := len(reports) > 0 && h.cut[reports[0].Group]
	h.mu.Unlock()
	if cut {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Home.Share(ctx, reports)
}

// checkShares checks, from every plan the processes took, that at every
// moment of [from, to) (every millisecond, and every moment a plan was
// taken) the shares the regions decided key under for l added up to at
// most the limit: each region's share the largest of its processes', as
// they decide on one store.
func (w *world) checkShares(key string, l tollgate.Limit, from, to time.Time) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var moments []time.Time
	for t := from; t.Before(to); t = t.Add(time.Millisecond) {
		moments = append(moments, t)
	}
	for k, ps := range w.plans {
		if k.key == key && k.l == l {
			for _, p := range ps {
				moments = append(moments, p.granted)
			}
		}
	}
	worst, worstAt := int64(0), time.Time{}
	for _, at := range moments {
		sum := int64(0)
		for _, procs := range w.regions {
			share := int64(0)
			for _, r := range procs {
				share = max(share, w.shareAt(r, key, l, at))
			}
			sum += share
		}
		if sum > worst {
			worst, worstAt = sum, at
		}
	}
	if worst > l.Rate {
		w.t.Errorf("at %s the shares of %s in force added up to %d, more than the limit %d:%s", worstAt.Format(time.StampMicro), l, worst, l.Rate, w.sharesAt(key, l, worstAt))
	} else {
		w.t.Logf("the shares of %s in force added up to at most %d of %d", l, worst, l.Rate)
	}
}

// shareAt is the share process r decided key under for l at at: its plan
// taken last before at, in force then (its floor without one).
func (w *world) shareAt(r *Region, key string, l tollgate.Limit, at time.Time) int64 {
	sh := r.s.limits[normalize(l)]
	e := &entry{sh: sh}
	share := sh.floor
	for _, p := range w.plans[planOf{r, key, l}] {
		if p.granted.After(at) {
			break
		}
		share = e.inForce(p, at, r.s.skew)
	}
	return share
}

// sharesAt describes every process's share at at, for a failure.
func (w *world) sharesAt(key string, l tollgate.Limit, at time.Time) string {
	out := ""
	for i, procs := range w.regions {
		out += fmt.Sprintf(" r%d", i)
		for _, r := range procs {
			out += fmt.Sprintf(" %d", w.shareAt(r, key, l, at))
		}
	}
	return out
}
