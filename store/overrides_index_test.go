package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// Overrides set while other replicas list them are all listed afterwards:
// 8 writers set 40 overrides each while 4 readers list the scope without
// pause, on a single node and on a Cluster (where the override's key and
// the index sit on different nodes, and a reader that found the index's
// field before the key once took the override for an expired one and
// dropped its field). Every override is listed, with its limits.
func TestRedisOverridesSetWhileListed(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
		ctx := context.Background()
		const writers, each, scope = 8, 40, "rule"
		limit := []tollgate.Limit{tollgate.PerMinute(7)}
		stop := make(chan struct{})
		var readers sync.WaitGroup
		for range 4 {
			readers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := st.Overrides(ctx, scope); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		var writing sync.WaitGroup
		for w := range writers {
			writing.Go(func() {
				for i := range each {
					o := tollgate.Override{Key: fmt.Sprintf("k%d-%d", w, i), Limits: limit}
					if err := st.SetOverride(ctx, scope, o, time.Hour); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		writing.Wait()
		close(stop)
		readers.Wait()
		got, err := st.Overrides(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		listed := make(map[string]bool, len(got))
		for _, o := range got {
			if len(o.Limits) != 1 || o.Limits[0] != limit[0] {
				t.Errorf("override %s: limits %v, want %v", o.Key, o.Limits, limit)
			}
			listed[o.Key] = true
		}
		for w := range writers {
			for i := range each {
				if k := fmt.Sprintf("k%d-%d", w, i); !listed[k] {
					t.Errorf("override %s was set and is not listed", k)
				}
			}
		}
		if len(got) != writers*each {
			t.Errorf("%d overrides listed, want %d", len(got), writers*each)
		}
	})
}

// A listing drops the field of an expired override, unless the index
// changed after the listing read it: the override set again between the
// listing's look at its key and the drop keeps its field.
func TestRedisExpiredOverrideDroppedUnlessSetAgain(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
		ctx := context.Background()
		const scope = "rule"
		index, gen := st.keys.overrideIndex(scope), st.keys.overrideIndexGen(scope)
		expired := func(key string) string {
			t.Helper()
			if err := st.SetOverride(ctx, scope, tollgate.Override{Key: key}, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := c.Del(ctx, st.keys.override(scope, key)).Err(); err != nil { // as its TTL would
				t.Fatal(err)
			}
			read, err := c.Get(ctx, gen).Result()
			if err != nil {
				t.Fatal(err)
			}
			return read
		}
		fields := func() map[string]string {
			t.Helper()
			f, err := c.HGetAll(ctx, index).Result()
			if err != nil {
				t.Fatal(err)
			}
			return f
		}

		read := expired("a")
		if err := st.SetOverride(ctx, scope, tollgate.Override{Key: "a"}, time.Hour); err != nil { // set again
			t.Fatal(err)
		}
		st.dropExpired(ctx, index, gen, read, []string{"a"})
		if _, ok := fields()["a"]; !ok {
			t.Fatal("the field of an override set again after the listing read the index was dropped")
		}
		got, err := st.Overrides(ctx, scope)
		if err != nil || len(got) != 1 || got[0].Key != "a" {
			t.Fatalf("listed %v (%v), want the override of a", got, err)
		}

		read = expired("b")
		st.dropExpired(ctx, index, gen, read, []string{"b"})
		if _, ok := fields()["b"]; ok {
			t.Fatal("the field of an expired override, the index unchanged since, was kept")
		}
		expired("c")
		got, err = st.Overrides(ctx, scope)
		if err != nil || len(got) != 1 || got[0].Key != "a" {
			t.Fatalf("listed %v (%v), want only the override of a", got, err)
		}
		if _, ok := fields()["c"]; ok {
			t.Fatal("a listing kept the field of an expired override")
		}
	})
}
