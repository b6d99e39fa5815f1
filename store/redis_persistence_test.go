package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// syncBuffer is a log destination written by the check's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// unpersisted returns telemetry.MetricUnpersisted by node.
func unpersisted(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricUnpersisted {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				node, _ := dp.Attributes.Value("redis.node")
				out[node.AsString()] = dp.Value
			}
		}
	}
	return out
}

// The first decision of a long limit checks, once, that Redis persists:
// a Redis with neither AOF nor RDB is warned of (log and gauge), on a
// single node and on every Cluster primary; one with AOF is not; short
// limits alone check nothing; the store never refuses to decide.
func TestPersistenceWarning(t *testing.T) {
	ctx := context.Background()
	newStore := func(c redis.UniversalClient) (*Redis, *syncBuffer, *sdkmetric.ManualReader) {
		var logs syncBuffer
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(ctx) })
		return newRedis(t, c, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithMeterProvider(mp)), &logs, reader
	}
	decide := func(st *Redis, l tollgate.Limit) {
		t.Helper()
		if d, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: l}); err != nil || !d.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v", l, d, err)
		}
	}
	t.Run("none", func(t *testing.T) {
		srv := redistest.Start(t)
		st, logs, reader := newStore(srv.Client(t))
		decide(st, tollgate.PerSecond(10))
		select {
		case <-st.persistence.done:
			t.Fatal("a short limit checked the persistence")
		case <-time.After(100 * time.Millisecond):
		}
		decide(st, tollgate.Monthly(1000))
		decide(st, tollgate.PerHour(10))
		<-st.persistence.done
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "appendonly yes") || !strings.Contains(logs.String(), srv.Addr()) {
			t.Fatalf("log = %q, want one warning naming the node and the fix", logs.String())
		}
		if got := unpersisted(t, reader); got[srv.Addr()] != 1 || len(got) != 1 {
			t.Fatalf("%s = %v, want 1 for %s", telemetry.MetricUnpersisted, got, srv.Addr())
		}
	})
	t.Run("aof", func(t *testing.T) {
		srv := redistest.Start(t, "--appendonly", "yes")
		st, logs, reader := newStore(srv.Client(t))
		decide(st, tollgate.Daily(5))
		<-st.persistence.done
		if strings.Contains(logs.String(), "level=WARN") {
			t.Fatalf("log = %q, want no warning for a Redis with AOF", logs.String())
		}
		if got := unpersisted(t, reader); got[srv.Addr()] != 0 || len(got) != 1 {
			t.Fatalf("%s = %v, want 0 for %s", telemetry.MetricUnpersisted, got, srv.Addr())
		}
	})
	t.Run("cluster", func(t *testing.T) {
		st, logs, reader := newStore(redistest.SharedCluster(t).Client(t))
		decide(st, tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 5, Period: 2 * time.Hour})
		<-st.persistence.done
		if n := strings.Count(logs.String(), "level=WARN"); n != 3 {
			t.Fatalf("log = %q, want a warning for each of the 3 primaries", logs.String())
		}
		if got := unpersisted(t, reader); len(got) != 3 {
			t.Fatalf("%s = %v, want 3 primaries at 1", telemetry.MetricUnpersisted, got)
		}
	})
}

// What a restart and a failover cost each kind of limit, by persistence:
// 300 of 1,000 used, then the server is killed (SIGKILL, 1.2s after the
// last write), shut down cleanly (SHUTDOWN), or its replica is promoted.
// A restart with AOF everysec keeps every count, the monthly quota's
// included; without persistence every count is forgotten. The table is
// logged; docs/redis.md#persistence quotes it.
func TestRestartCostByPersistence(t *testing.T) {
	limits := []tollgate.Limit{
		{Algorithm: tollgate.TokenBucket, Rate: 1000, Period: 24 * time.Hour},
		{Algorithm: tollgate.GCRA, Rate: 1000, Period: 24 * time.Hour},
		{Algorithm: tollgate.SlidingWindow, Rate: 1000, Period: 24 * time.Hour},
		{Algorithm: tollgate.FixedWindow, Rate: 1000, Period: 24 * time.Hour},
		tollgate.Monthly(1000),
	}
	ctx := context.Background()
	key := func(l tollgate.Limit) string { return "tenant " + l.String() } // a state each
	available := func(st *Redis, l tollgate.Limit) int64 {
		t.Helper()
		d, err := st.Peek(ctx, tollgate.Request{Key: key(l), Limit: l})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining + 1
	}
	configs := []struct {
		name string
		args []string
		// want: available after a crash, a clean shutdown, a failover.
		crash, clean, failover int64
	}{
		{"none", nil, 1000, 1000, 700},
		{"rdb (save 3600 1)", []string{"--save", "3600 1"}, 1000, 700, 700},
		{"aof everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, 700, 700, 700},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-20s %-10s %s\n", "persistence", "event", "available of 1000 after 300 used: tb gcra sw fw monthly")
	for _, cfg := range configs {
		for _, event := range []string{"crash", "clean", "failover"} {
			srv := redistest.Start(t, cfg.args...)
			// Redis's own persistence alone: the journal would debit again
			// on the restarted server what it still holds.
			st := newRedis(t, srv.Client(t), WithJournal(0))
			var replica *redistest.Server
			if event == "failover" {
				replica = redistest.Replica(t, srv)
			}
			for _, l := range limits {
				if _, err := st.Allow(ctx, tollgate.Request{Key: key(l), Limit: l, Cost: 300}); err != nil {
					t.Fatal(err)
				}
			}
			switch event {
			case "crash":
				redistest.Elapse(1200 * time.Millisecond) // past one everysec fsync
				srv.Restart(t)
			case "clean":
				_ = srv.Client(t).Shutdown(ctx).Err() // the connection ends with the server
				srv.Restart(t)
			case "failover":
				// Replication is asynchronous: a failover loses what the replica
				// had not received, whatever the persistence. A write of its
				// own acknowledged (WAIT on the connection that made it; the
				// stream is in order) makes that nothing here.
				awaitAcknowledged(t, srv, "persistence:synced")
				srv.Stop(t)
				if err := replica.Client(t).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
					t.Fatal(err)
				}
				st = newRedis(t, replica.Client(t), WithJournal(0))
			}
			want := map[string]int64{"crash": cfg.crash, "clean": cfg.clean, "failover": cfg.failover}[event]
			var got []string
			for _, l := range limits {
				n := available(st, l)
				got = append(got, fmt.Sprint(n))
				if n != want {
					t.Errorf("%s, %s: %s has %d available, want %d", cfg.name, event, l, n, want)
				}
			}
			fmt.Fprintf(&table, "%-20s %-10s %s\n", cfg.name, event, strings.Join(got, " "))
		}
	}
	t.Log(table.String())
}
