package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

func TestRedisAllowAllPeekReset(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := NewRedis(c, WithPrefix(redistest.KeyPrefix(t)))
		ctx := context.Background()
		// Two identities, on different slots of a Cluster (their tags
		// differ), and a window on the first identity: one slot, two keys.
		tenant := tollgate.Request{Key: "tenant-a", Limit: quotaLimit(tollgate.TokenBucket, 5)}
		global := tollgate.Request{Key: "global", Limit: quotaLimit(tollgate.TokenBucket, 3)}
		daily := tollgate.Request{Key: "tenant-a", Limit: quotaLimit(tollgate.FixedWindow, 4)}
		set := []tollgate.Request{tenant, global, daily}
		for n := range 3 {
			ds, err := st.AllowAll(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			want := []int64{4 - int64(n), 2 - int64(n), 3 - int64(n)}
			for i, d := range ds {
				if !d.Allowed || d.Remaining != want[i] {
					t.Fatalf("set %d, request %d: %+v, want admitted with %d remaining", n, i, d, want[i])
				}
			}
		}
		// The global limit is spent: the set is denied and debits nothing.
		ds, err := st.AllowAll(ctx, set)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if d.Allowed {
				t.Fatalf("request %d of a set the global limit denies: %+v", i, d)
			}
		}
		if ds[1].RetryAfter <= 0 || ds[0].RetryAfter != 0 || ds[2].RetryAfter != 0 {
			t.Fatalf("denied set: %+v; only the global request has a wait", ds)
		}
		// Peek answers what Allow would: the remaining after a debit of 1.
		for i, want := range []int64{1, 0, 0} {
			d, err := st.Peek(ctx, set[i])
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != want {
				t.Fatalf("peek of request %d after a denied set: %+v, want %d remaining", i, d, want)
			}
		}
		if err := st.Reset(ctx, global); err != nil {
			t.Fatal(err)
		}
		if d, err := st.Peek(ctx, global); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("peek after reset: %+v, %v; want admitted with 2 remaining (a full bucket less the cost)", d, err)
		}
		if d, err := st.Allow(ctx, global); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("allow after reset: %+v, %v", d, err)
		}
	})
}
