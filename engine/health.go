package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// warnEvery is the least time between two WARNs of one kind (the store
// unreachable, reachable again, one rule answering by its fail mode): a
// store that flaps is logged once a minute, with how often it flapped.
const warnEvery = time.Minute

// Ready returns nil when the Limiter's store answers within ctx, and the
// store's error otherwise (logged at WARN, and counted as an outage): call
// it before serving, and from the server's health service, so that a
// replica whose store is down is not sent traffic its rules would answer
// by their fail modes. A store that cannot be asked (not a
// tollgate.Pinger) is taken as ready. Give ctx a deadline: a first ping
// also dials.
func (l *Limiter) Ready(ctx context.Context) error {
	p, ok := l.store.(tollgate.Pinger)
	if !ok {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) { // not the caller gone
			l.health.failed(l.clk.now(), nil, err)
		}
		return fmt.Errorf("engine: the store does not answer: %w", err)
	}
	if l.health.down.Load() {
		l.health.answered(l.clk.now())
	}
	return nil
}

// health follows whether the store answers and which rules answer by their
// fail mode meanwhile, for the log and the metrics. The store's calls tell
// it (storeFailed, storeAnswered); only a change takes its lock.
type health struct {
	log *slog.Logger
	// down: the last store call failed.
	down atomic.Bool

	mu       sync.Mutex
	since    time.Time            // when the store last became unreachable
	warnedAt [2]time.Time         // the last WARN of down, of up
	flaps    int                  // outages not logged since the last WARN of one
	failing  map[string]int64     // the rules that answered by their fail mode since, and how often
	ruleWarn map[string]time.Time // the last WARN of each rule's fail mode

	outages, episodes metric.Int64Counter
	gauge             metric.Int64ObservableGauge
}

// init creates the health's instruments on meter.
func (h *health) init(log *slog.Logger, meter metric.Meter) error {
	h.log, h.failing, h.ruleWarn = log, map[string]int64{}, map[string]time.Time{}
	var err error
	if h.outages, err = meter.Int64Counter(telemetry.MetricStoreOutages, metric.WithUnit("{outage}"),
		metric.WithDescription("Times the shared store became unreachable.")); err != nil {
		return err
	}
	if h.episodes, err = meter.Int64Counter(telemetry.MetricFailModeEpisodes, metric.WithUnit("{episode}"),
		metric.WithDescription("Times a rule started answering by its fail mode, by rule and fail mode.")); err != nil {
		return err
	}
	h.gauge, err = meter.Int64ObservableGauge(telemetry.MetricStoreReachable,
		metric.WithDescription("1 while the shared store answers, 0 while it does not."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			v := int64(1)
			if h.down.Load() {
				v = 0
			}
			o.Observe(v)
			return nil
		}))
	return err
}

// failed records a store failure at now, seen by checks (none: a Ready).
func (h *health) failed(now time.Time, checks []*check, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		h.down.Store(true)
		h.since = now
		h.outages.Add(context.Background(), 1)
		if now.Sub(h.warnedAt[0]) >= warnEvery {
			h.log.Warn("tollgate: the rate-limit store is unreachable; rules answer by their fail modes until it is back",
				"error", cause, "outages_not_logged", h.flaps)
			h.warnedAt[0], h.flaps = now, 0
		} else {
			h.flaps++
		}
	}
	for _, c := range checks {
		name := c.p.rule.Name
		n, seen := h.failing[name]
		h.failing[name] = n + 1
		if seen {
			continue
		}
		mode := c.p.rule.FailMode.String()
		h.episodes.Add(context.Background(), 1, metric.WithAttributes(
			telemetry.AttrRule.String(name), telemetry.AttrFailMode.String(mode)))
		if now.Sub(h.ruleWarn[name]) >= warnEvery {
			h.log.Warn("tollgate: a rule answers by its fail mode: the store cannot decide",
				"rule", name, "fail_mode", mode, "error", cause)
			h.ruleWarn[name] = now
		}
	}
}

// answered records that the store answered at now, after it failed.
func (h *health) answered(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return
	}
	h.down.Store(false)
	if now.Sub(h.warnedAt[1]) >= warnEvery {
		attrs := []any{"after", now.Sub(h.since).Round(time.Millisecond)}
		for name, n := range h.failing {
			attrs = append(attrs, slog.Int64("fail_mode_decisions."+name, n))
		}
		h.log.Warn("tollgate: the rate-limit store answers again; rules decide by it", attrs...)
		h.warnedAt[1] = now
	}
	clear(h.failing)
}
