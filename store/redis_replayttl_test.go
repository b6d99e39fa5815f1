package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestRedisMarkerFollowsReplayTTL checks the request-id marker's PTTL: the
// store's replay TTL, or Request.ReplayTTL in whole milliseconds rounded up
// when that is shorter; for a set, the longest of its requests'.
func TestRedisMarkerFollowsReplayTTL(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t)
		st := newRedis(t, c, WithPrefix(prefix), WithReplayTTL(10*time.Second))
		ctx := context.Background()
		pttl := func(key, id string, alg tollgate.Algorithm) time.Duration {
			t.Helper()
			d, err := c.PTTL(ctx, decisionKeys(prefix, alg, key, id)[1]).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for _, tc := range []struct {
			name      string
			replayTTL time.Duration
			want      time.Duration
		}{
			{"unset", 0, 10 * time.Second},
			{"shorter", 1500 * time.Millisecond, 1500 * time.Millisecond},
			{"rounded up to a tenth of a second", 1402*time.Millisecond + time.Microsecond, 1500 * time.Millisecond},
			{"longer than the store's", time.Hour, 10 * time.Second},
		} {
			req := tollgate.Request{Key: "ttl-" + tc.name, Limit: tollgate.PerHour(10), RequestID: "id-1", ReplayTTL: tc.replayTTL}
			if d, err := st.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", tc.name, d, err)
			}
			// PTTL reads whole milliseconds left: at most want, and no
			// more than the time since the call below it.
			if got := pttl(req.Key, req.RequestID, req.Limit.Algorithm); got > tc.want || got < tc.want-200*time.Millisecond {
				t.Errorf("%s: marker PTTL %v, want %v", tc.name, got, tc.want)
			}
		}

		// A set: the longest ReplayTTL of its requests, or the store's when
		// one has none.
		a := tollgate.Request{Key: "set-a", Limit: tollgate.PerHour(10), RequestID: "id-2", ReplayTTL: time.Second}
		b := tollgate.Request{Key: "set-b", Limit: tollgate.PerHour(10), RequestID: "id-2", ReplayTTL: 3 * time.Second}
		if _, err := st.AllowAll(ctx, []tollgate.Request{a, b}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []tollgate.Request{a, b} {
			if got := pttl(r.Key, r.RequestID, r.Limit.Algorithm); got > 3*time.Second || got < 2800*time.Millisecond {
				t.Errorf("set of ReplayTTLs 1s and 3s: marker of %s has PTTL %v, want 3s", r.Key, got)
			}
		}
		b.ReplayTTL, a.RequestID, b.RequestID = 0, "id-3", "id-3"
		if _, err := st.AllowAll(ctx, []tollgate.Request{a, b}); err != nil {
			t.Fatal(err)
		}
		if got := pttl(a.Key, a.RequestID, a.Limit.Algorithm); got < 9800*time.Millisecond {
			t.Errorf("set where one request has no ReplayTTL: marker PTTL %v, want the store's 10s", got)
		}
	})
}
