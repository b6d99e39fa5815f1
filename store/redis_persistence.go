package store

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// longWindow is the shortest period of a limit whose count a restart of a
// Redis without persistence visibly forgets: the Redis store checks, once,
// that Redis persists its data when it first decides such a limit (or a
// calendar window). docs/redis.md#persistence has the measurements.
const longWindow = time.Hour

// persistenceTimeout bounds the check.
const persistenceTimeout = 2 * time.Second

// persistence is the Redis store's one check of its nodes' persistence.
type persistence struct {
	started atomic.Bool
	log     *slog.Logger         // nil: slog.Default()
	meter   metric.MeterProvider // nil: otel.GetMeterProvider()
	done    chan struct{}        // closed when the check ended (for tests)
}

// needsPersistence reports whether l is a limit a restart would visibly
// forget.
func needsPersistence(l tollgate.Limit) bool {
	return l.Calendar != 0 || l.Period >= longWindow
}

// note starts the check of the nodes' persistence, through r, at the
// first long limit l: on a goroutine of its own, which ends within
// persistenceTimeout, so that no call waits for it.
func (p *persistence) note(l tollgate.Limit, r *road) {
	if p.started.Load() || !needsPersistence(l) || !p.started.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer close(p.done)
		ctx, cancel := context.WithTimeout(context.Background(), persistenceTimeout)
		defer cancel()
		p.check(ctx, r)
	}()
}

// check asks every primary of r's client whether it writes an AOF or RDB
// snapshots, and warns of each that does neither.
func (p *persistence) check(ctx context.Context, r *road) {
	log := p.log
	if log == nil {
		log = slog.Default()
	}
	mp := p.meter
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	gauge, _ := mp.Meter("github.com/tollgate/tollgate/store").Int64Gauge(telemetry.MetricUnpersisted,
		metric.WithDescription("1 when a Redis node holding limits of an hour or longer keeps neither an AOF nor RDB snapshots: a restart forgets their counts"))
	check := func(ctx context.Context, c *redis.Client) error {
		node := c.Options().Addr
		got, err := bounded(r, ctx, func(ctx context.Context) ([2]string, error) { return persistenceOf(ctx, c) })
		aof, rdb := got[0], got[1]
		if err != nil {
			log.Info("tollgate: redis store: cannot tell whether Redis persists its data", "redis.node", node, "error", err)
			return nil
		}
		persisted := aof == "yes" || strings.TrimSpace(rdb) != ""
		v := int64(0)
		if !persisted {
			v = 1
			log.Warn("tollgate: redis store: Redis keeps neither an AOF nor RDB snapshots, and limits of an hour or longer are kept on it: a restart forgets their counts. Turn on appendonly yes with appendfsync everysec (docs/redis.md#persistence)",
				"redis.node", node)
		}
		if gauge != nil {
			gauge.Record(ctx, v, metric.WithAttributes(telemetry.AttrRedisNode.String(node)))
		}
		return nil
	}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, c)
	}
}

// persistenceOf returns the node's appendonly setting and its RDB save
// points ("" for none), from CONFIG GET.
func persistenceOf(ctx context.Context, c *redis.Client) ([2]string, error) {
	m, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return [2]string{}, err
	}
	s, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		return [2]string{}, err
	}
	return [2]string{m["appendonly"], s["save"]}, nil
}
