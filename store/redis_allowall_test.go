package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/internal/redistest"
)

func TestRedisAllowAllPeekReset(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
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

// scriptCounter is a go-redis hook counting the script calls a client
// sends, alone or in a pipeline.
type scriptCounter struct{ calls atomic.Int64 }

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			s.calls.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				s.calls.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestRedisPartsOneCall: two token-bucket limits of one identity, each
// under a part key (partkey.Join), are decided in one script call on a
// Cluster too (their keys share the identity's slot), and 64 callers under
// 5/s and 20/hour get exactly 20 admissions.
func TestRedisPartsOneCall(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		counter := &scriptCounter{}
		c.AddHook(counter)
		prefix := redistest.KeyPrefix(t)
		st := newRedis(t, c, WithPrefix(prefix), WithBatching(0, 0))
		ctx := context.Background()
		second := tollgate.Request{Key: partkey.Join("tenant-7", "second"), Limit: tollgate.PerSecond(5)}
		hour := tollgate.Request{Key: partkey.Join("tenant-7", "hour"), Limit: tollgate.PerHour(20)}
		set := []tollgate.Request{second, hour}
		k1, k2 := decisionKeys(prefix, 0, second.Key, "")[0], decisionKeys(prefix, 0, hour.Key, "")[0]
		if k1 == k2 || slot(k1) != slot(k2) {
			t.Fatalf("part keys %q and %q: want distinct names on one slot", k1, k2)
		}
		// The script is loaded on the slot's node first: a first call may
		// be answered NOSCRIPT and sent again with EVAL.
		if _, err := st.Peek(ctx, second); err != nil {
			t.Fatal(err)
		}
		counter.calls.Store(0)
		if _, err := st.AllowAll(ctx, set); err != nil {
			t.Fatal(err)
		}
		if n := counter.calls.Load(); n != 1 {
			t.Fatalf("one set of two part keys took %d script calls, want 1", n)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(20 * time.Second)
		for range 64 {
			wg.Go(func() {
				for admitted.Load() < 19 && time.Now().Before(deadline) {
					ds, err := st.AllowAll(ctx, set)
					if err != nil {
						t.Error(err)
						return
					}
					if ds[0].Allowed {
						admitted.Add(1)
					} else {
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 19 {
			t.Fatalf("64 callers under 5/s and 20/hour admitted %d sets after the first; want exactly 19", n)
		}
		// Once the per-second bucket is full again, a set the hour denies
		// leaves it full.
		redistest.Eventually(t, 2*time.Second, func() error {
			if d, err := st.Peek(ctx, second); err != nil || d.Remaining != 4 {
				return fmt.Errorf("5/s after the hour was spent: %+v, %v; want a full bucket (4 after the peeked unit)", d, err)
			}
			return nil
		})
		ds, err := st.AllowAll(ctx, set)
		if err != nil || ds[0].Allowed || ds[1].Allowed || ds[0].RetryAfter != 0 {
			t.Fatalf("set after 20 admissions: %+v, %v; want denied by the hour only", ds, err)
		}
		if d, err := st.Peek(ctx, second); err != nil || d.Remaining != 4 {
			t.Fatalf("5/s after the hour was spent: %+v, %v; want a full bucket (4 after the peeked unit)", d, err)
		}
	})
}
