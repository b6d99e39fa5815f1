package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// Both stores keep each replica's summary of a rule, the last one
// published, apart from other rules', and forget them ttl after the last
// publication; Redis keeps them in one hash per rule with that expiry, on
// a single node and on a Cluster. Both answer Ping.
func TestRefusedSummaries(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	mem := newMemory(t, WithClock(func() time.Time { return now }))
	single := redistest.Single(t)
	cluster := redistest.SharedCluster(t)
	stores := map[string]struct {
		st     tollgate.RefusedStore
		client redis.UniversalClient
	}{
		"memory":  {st: mem},
		"single":  {st: newRedis(t, single.Client(t), WithPrefix(redistest.KeyPrefix(t))), client: single.Client(t)},
		"cluster": {st: newRedis(t, cluster.Client(t), WithPrefix(redistest.KeyPrefix(t))), client: cluster.Client(t)},
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if err := s.st.(tollgate.Pinger).Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			for _, p := range []struct{ rule, replica, summary string }{
				{"tenant", "a", "a1"}, {"tenant", "b", "b1"}, {"tenant", "a", "a2"}, {"other", "a", "o1"},
			} {
				if err := s.st.PublishRefused(ctx, p.rule, p.replica, []byte(p.summary), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.st.RefusedSummaries(ctx, "tenant")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || string(got["a"]) != "a2" || string(got["b"]) != "b1" {
				t.Errorf("summaries of tenant: %q; want a=a2 b=b1", got)
			}
			if err := s.st.PublishRefused(ctx, "tenant", "a", nil, 0); err == nil {
				t.Error("a ttl of 0 was accepted")
			}
			if s.client != nil {
				r := s.st.(*Redis)
				ttl, err := s.client.PTTL(ctx, r.refusedKey("tenant")).Result()
				if err != nil || ttl <= 0 || ttl > time.Minute {
					t.Errorf("the hash's PTTL is %v (%v); want at most a minute", ttl, err)
				}
				return
			}
			now = now.Add(time.Minute)
			if got, err := s.st.RefusedSummaries(ctx, "tenant"); err != nil || len(got) != 0 {
				t.Errorf("a minute on: %q, %v; want none", got, err)
			}
		})
	}
}
