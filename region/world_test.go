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
// region's store), and what they admitted.
type world struct {
	t       *testing.T
	regions [][]*Region // by region, its processes
	names   []string

	stop    chan struct{}
	drivers sync.WaitGroup
	log     admitlog.Log
}

// newWorld starts one Region per store, named r0, r1, ..., on home, with
// c's tuning (its Region and Regions are set here). They are closed when
// the test ends.
func newWorld(t *testing.T, home Home, stores []tollgate.Store, c Config) *world {
	t.Helper()
	homes := make([][]Home, len(stores))
	for i := range homes {
		homes[i] = []Home{home}
	}
	return newProcesses(t, homes, stores, c)
}

// newProcesses starts, for region i, one Region (process) per home in
// homes[i], each on stores[i], the region's store: as many processes as
// the region runs, each with its own connection to the Home.
func newProcesses(t *testing.T, homes [][]Home, stores []tollgate.Store, c Config) *world {
	t.Helper()
	w := &world{t: t, stop: make(chan struct{})}
	for i := range stores {
		w.names = append(w.names, fmt.Sprint("r", i))
	}
	t.Cleanup(w.close)
	for i, st := range stores {
		c.Region, c.Regions = w.names[i], w.names
		var procs []*Region
		for _, h := range homes[i] {
			r, err := New(st, h, c)
			if err != nil {
				t.Fatal(err)
			}
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

// drive starts asking region i for cost units of key under l every
// period until its stop is closed or halt, recording what is admitted:
// spread over its processes, each asking every period × processes.
func (w *world) drive(i int, key string, l tollgate.Limit, cost int64, period time.Duration, stop <-chan struct{}) {
	procs := w.regions[i]
	for _, r := range procs {
		w.drivers.Go(func() { w.ask(i, r, key, l, cost, period*time.Duration(len(procs)), stop) })
	}
}

// halt stops every driver and waits for them.
func (w *world) halt() {
	close(w.stop)
	w.drivers.Wait()
}

func (w *world) ask(i int, r *Region, key string, l tollgate.Limit, cost int64, period time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-w.stop:
			return
		default:
		}
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
			w.log.Add(i, at, cost)
		}
		time.Sleep(period)
	}
}

// between sums what region i (-1: every region) admitted in [from, to).
func (w *world) between(i int, from, to time.Time) int64 { return w.log.Units(i, from, to) }

// rate is what region i (-1: every region) admitted per second in [from, to).
func (w *world) rate(i int, from, to time.Time) float64 { return w.log.Rate(i, from, to) }

// checkEnvelope checks that, over every span of each length in spans
// ending at an admission, the regions together admitted at most what one
// token bucket of l admits (its burst and the rate over the span), plus
// slack units.
func (w *world) checkEnvelope(l tollgate.Limit, slack int64, spans ...time.Duration) {
	w.t.Helper()
	for _, span := range spans {
		s := w.log.Worst(l, span)
		if s.Units > s.Allowed+slack {
			w.t.Errorf("over %s the regions admitted %d (%v by region), more than %s allows (%d) plus %d", span, s.Units, s.ByRegion, l, s.Allowed, slack)
		} else {
			w.t.Logf("over %s at most %d admitted of %d allowed", span, s.Units, s.Allowed)
		}
	}
}

// checkWindows checks that in every window of l the regions together
// admitted at most its units.
func (w *world) checkWindows(l tollgate.Limit, from, to time.Time) {
	w.t.Helper()
	worst := int64(0)
	for start := from.Truncate(l.Period); start.Before(to); start = start.Add(l.Period) {
		n := w.between(-1, start, start.Add(l.Period))
		worst = max(worst, n)
		if n > l.Rate {
			w.t.Errorf("the window from %s admitted %d, more than %d", start.Format(time.StampMilli), n, l.Rate)
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

// inForce is the share region i decides key under for l now: the largest
// its processes hold, as they decide on one store.
func (w *world) inForce(i int, key string, l tollgate.Limit) int64 {
	s := int64(0)
	for _, r := range w.regions[i] {
		s = max(s, r.shareInForce(key, l))
	}
	return s
}

// watchShares checks every step, until the world halts, that the shares
// the regions decide under for key and l add up to at most the limit.
func (w *world) watchShares(key string, l tollgate.Limit, step time.Duration) {
	w.drivers.Go(func() {
		worst := int64(0)
		for {
			select {
			case <-w.stop:
				w.t.Logf("the shares in force added up to at most %d of %d", worst, l.Rate)
				return
			case <-time.After(step):
			}
			sum := int64(0)
			for i := range w.regions {
				sum += w.inForce(i, key, l)
			}
			worst = max(worst, sum)
			if sum > l.Rate {
				w.t.Errorf("at %s the shares in force add up to %d, more than the limit %d", time.Now().Format(time.StampMilli), sum, l.Rate)
			}
		}
	})
}
