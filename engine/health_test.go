package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// unplugged is a Memory store that fails every call while down is set, as
// an unreachable Redis does.
type unplugged struct {
	*store.Memory
	down atomic.Bool
}

var errUnplugged = errors.New("dial tcp 10.0.0.1:6379: connection refused")

func (u *unplugged) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if u.down.Load() {
		return tollgate.Decision{}, errUnplugged
	}
	return u.Memory.Allow(ctx, req)
}

func (u *unplugged) Ping(ctx context.Context) error {
	if u.down.Load() {
		return errUnplugged
	}
	return nil
}

// counterSum is the sum of a counter's points, and the gauge's last value.
func metricValue(t *testing.T, r *sdkmetric.ManualReader, name string) (sum int64, points int) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sum, points = sum+p.Value, points+1
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					sum, points = p.Value, points+1
				}
			}
		}
	}
	return sum, points
}

// An outage is logged once at WARN when the store stops answering, once
// per rule that answers by its fail mode, and once when the store is back,
// however many calls fail meanwhile; the same is counted as metrics. A
// second outage within a minute is counted, not logged again.
func TestHealthWarnsOncePerChange(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	st := &unplugged{Memory: storefixture.Memory(t, store.WithClock(clk.Now))}
	var buf bytes.Buffer
	reader := sdkmetric.NewManualReader()
	cfg := engine.Config{
		Rules: []engine.Rule{
			{Name: "open", Methods: []string{"GET /a"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerSecond(100))},
			{Name: "closed", Methods: []string{"GET /b"}, Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerSecond(100)), FailMode: engine.FailClosed},
		},
		Logger:          slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MeterProvider:   sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		BreakerFailures: -1,
	}
	enginetest.Clock(clk)(&cfg)
	l, err := engine.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	call := func(method string) error {
		v := l.Begin(context.Background(), engine.Call{Method: method, Header: keyfunc.HTTPHeader(http.Header{"X-Tenant": {"acme"}})})
		if v.Err() == nil {
			v.End(nil, nil)
		}
		return v.Err()
	}
	if err := l.Ready(context.Background()); err != nil {
		t.Fatalf("Ready with the store up: %v", err)
	}
	if v, _ := metricValue(t, reader, telemetry.MetricStoreReachable); v != 1 {
		t.Errorf("%s = %d with the store up, want 1", telemetry.MetricStoreReachable, v)
	}
	st.down.Store(true)
	for range 50 {
		if err := call("GET /a"); err != nil {
			t.Fatalf("FailOpen refused: %v", err)
		}
		if err := call("GET /b"); err == nil {
			t.Fatal("FailClosed admitted")
		}
	}
	if err := l.Ready(context.Background()); !errors.Is(err, errUnplugged) {
		t.Errorf("Ready with the store down: %v, want its error", err)
	}
	if v, _ := metricValue(t, reader, telemetry.MetricStoreReachable); v != 0 {
		t.Errorf("%s = %d with the store down, want 0", telemetry.MetricStoreReachable, v)
	}
	st.down.Store(false)
	clk.Advance(time.Second)
	for range 10 {
		call("GET /a")
	}
	log := buf.String()
	for _, want := range []string{
		"store is unreachable", "connection refused",
		`rule=open fail_mode=open`, `rule=closed fail_mode=closed`,
		"store answers again", "after=1s", "fail_mode_decisions.open=50", "fail_mode_decisions.closed=50",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "level=WARN"); n != 4 {
		t.Errorf("%d WARN lines, want 4 (down, two rules, up):\n%s", n, log)
	}
	// A second outage within the minute: counted, not logged.
	buf.Reset()
	st.down.Store(true)
	call("GET /a")
	st.down.Store(false)
	call("GET /a")
	if buf.Len() != 0 {
		t.Errorf("a second outage within a minute was logged:\n%s", buf.String())
	}
	if v, _ := metricValue(t, reader, telemetry.MetricStoreOutages); v != 2 {
		t.Errorf("%s = %d, want 2", telemetry.MetricStoreOutages, v)
	}
	if v, n := metricValue(t, reader, telemetry.MetricFailModeEpisodes); v != 3 || n != 2 {
		t.Errorf("%s = %d in %d series, want 3 in 2 (open twice, closed once)", telemetry.MetricFailModeEpisodes, v, n)
	}
	// A minute on, an outage is logged again, saying how many were not.
	clk.Advance(time.Minute)
	st.down.Store(true)
	call("GET /a")
	if !strings.Contains(buf.String(), "outages_not_logged=1") {
		t.Errorf("the outage after a minute: %q; want it logged with the one not logged", buf.String())
	}
}

// Ready on a Redis store nobody listens on fails within the caller's
// deadline, naming the cause.
func TestReadyRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	l, err := engine.New(storefixture.Redis(t, c), engine.Config{Rules: refusedRules(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Ready(ctx); err == nil || !strings.Contains(err.Error(), "ping") {
		t.Errorf("Ready = %v, want the ping's error", err)
	}
}
