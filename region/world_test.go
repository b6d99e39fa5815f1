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
// store, and what they admitted.
type world struct {
	t       *testing.T
	home    Home
	regions []*Region
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
	w := &world{t: t, home: home, stop: make(chan struct{})}
	for i := range stores {
		w.names = append(w.names, fmt.Sprint("r", i))
	}
	for i, st := range stores {
		c.Region, c.Regions = w.names[i], w.names
		r, err := New(st, home, c)
		if err != nil {
			t.Fatal(err)
		}
		w.regions = append(w.regions, r)
	}
	t.Cleanup(w.close)
	return w
}

func (w *world) close() {
	for _, r := range w.regions {
		if err := r.Close(context.Background()); err != nil {
			w.t.Errorf("close: %v", err)
		}
	}
}

// drive starts asking region i for cost units of key under l every
// period until its stop is closed or halt, recording what is admitted.
func (w *world) drive(i int, key string, l tollgate.Limit, cost int64, period time.Duration, stop <-chan struct{}) {
	w.drivers.Go(func() { w.ask(i, key, l, cost, period, stop) })
}

// halt stops every driver and waits for them.
func (w *world) halt() {
	close(w.stop)
	w.drivers.Wait()
}

func (w *world) ask(i int, key string, l tollgate.Limit, cost int64, period time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-w.stop:
			return
		default:
		}
		d, err := w.regions[i].Allow(context.Background(), tollgate.Request{Key: key, Limit: l, Cost: cost})
		if err != nil {
			w.t.Errorf("region %d: %v", i, err)
			return
		}
		if d.Allowed {
			w.log.Add(i, time.Now(), cost)
		}
		time.Sleep(period)
	}
}

// between sums what region i (-1: every region) admitted in [from, to).
func (w *world) between(i int, from, to time.Time) int64 { return w.log.Units(i, from, to) }

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

func (h *cutHome) Report(ctx context.Context, reports []Report) ([]Reply, error) {
	h.mu.Lock()
	cut := len(reports) > 0 && h.cut[reports[0].Region]
	h.mu.Unlock()
	if cut {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Home.Report(ctx, reports)
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
			for _, r := range w.regions {
				sum += r.shareInForce(key, l)
			}
			worst = max(worst, sum)
			if sum > l.Rate {
				w.t.Errorf("at %s the shares in force add up to %d, more than the limit %d", time.Now().Format(time.StampMilli), sum, l.Rate)
			}
		}
	})
}
