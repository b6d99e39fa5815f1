package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/store"
	"github.com/tollgate/tollgate/store/storetest"
)

// newFakeClock starts at an arbitrary instant, not on a round second, so
// that nothing depends on where the clock starts.
func newFakeClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_760_000_000, 123_457_000)) }

func TestMemoryConformance(t *testing.T) {
	clock := newFakeClock()
	storetest.Run(t, storetest.Harness{
		Store:      newMemory(t, store.WithClock(clock.Now)),
		Advance:    clock.Advance,
		MaxReplays: 4,
	})
}

func TestMemoryConformanceOtherReplays(t *testing.T) {
	clock := newFakeClock()
	storetest.Run(t, storetest.Harness{
		Store:      newMemory(t, store.WithClock(clock.Now), store.WithMaxReplays(1)),
		Advance:    clock.Advance,
		MaxReplays: 1,
	})
}

func allow(t *testing.T, m *store.Memory, req tollgate.Request) tollgate.Decision {
	t.Helper()
	d, err := m.Allow(context.Background(), req)
	if err != nil {
		t.Fatalf("Allow(%q): %v", req.Key, err)
	}
	return d
}

// distinctKeys is how many identities TestMemoryMaxKeysBound pours into a
// store bounded to a thousand (fewer under the race detector, which makes
// each call ten times slower; memory_race_test.go).
var distinctKeys = 1_000_000

func TestMemoryMaxKeysBound(t *testing.T) {
	const bound = 1000
	m := newMemory(t, store.WithMaxKeys(bound))
	limit := tollgate.PerHour(10)
	for i := range distinctKeys {
		allow(t, m, tollgate.Request{Key: fmt.Sprint("k", i), Limit: limit, RequestID: "id"})
		if i%10_000 == 0 {
			if n := m.Len(); n > bound {
				t.Fatalf("after %d keys the store holds %d entries; want at most %d", i+1, n, bound)
			}
		}
	}
	if n := m.Len(); n != bound {
		t.Fatalf("after %d keys the store holds %d entries; want exactly the bound %d", distinctKeys, n, bound)
	}
}

func TestMemoryMaxKeysEvictsClosestToExpiry(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, store.WithClock(clock.Now), store.WithMaxKeys(2))
	long := tollgate.Limit{Rate: 1, Period: time.Hour}
	short := tollgate.Limit{Rate: 1, Period: time.Minute}
	allow(t, m, tollgate.Request{Key: "long", Limit: long})
	allow(t, m, tollgate.Request{Key: "short", Limit: short})
	allow(t, m, tollgate.Request{Key: "third", Limit: long}) // one must go
	if n := m.Len(); n != 2 {
		t.Fatalf("Len = %d; want 2", n)
	}
	if d := allow(t, m, tollgate.Request{Key: "long", Limit: long}); d.Allowed {
		t.Fatalf("the entry furthest from expiry was evicted: %+v", d)
	}
	if d := allow(t, m, tollgate.Request{Key: "short", Limit: short}); !d.Allowed {
		t.Fatalf("the entry closest to expiry was kept: %+v", d)
	}
}

func TestMemoryIdleExpiry(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, store.WithClock(clock.Now))
	// 10 per second: one admission refills in 100ms, and its state lives
	// as long as its Redis key would: 100ms, plus the scripts' 1ms margin.
	limit := tollgate.PerSecond(10)
	const idle = 5000
	for i := range idle {
		allow(t, m, tollgate.Request{Key: fmt.Sprint("idle", i), Limit: limit})
	}
	if n := m.Len(); n != idle {
		t.Fatalf("Len = %d; want %d", n, idle)
	}
	clock.Advance(101*time.Millisecond - time.Microsecond)
	allow(t, m, tollgate.Request{Key: "busy", Limit: limit})
	if n := m.Len(); n != idle+1 {
		t.Fatalf("Len = %d a microsecond before expiry; want %d", n, idle+1)
	}
	clock.Advance(time.Microsecond)
	// Every decision reclaims a few expired entries of its shard and of one
	// other: steady traffic on one key reclaims the lot.
	for range 2 * idle {
		allow(t, m, tollgate.Request{Key: "busy", Limit: tollgate.PerHour(1 << 20)})
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("Len = %d after the idle identities expired; want 1 (the busy key)", n)
	}
}

func TestMemoryReplayTTL(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, store.WithClock(clock.Now), store.WithReplayTTL(time.Second))
	req := tollgate.Request{Key: "k", Limit: tollgate.PerHour(10), RequestID: "r1"}
	if d := allow(t, m, req); !d.Allowed || d.Replayed || d.Remaining != 9 {
		t.Fatalf("first: %+v", d)
	}
	clock.Advance(time.Second - time.Microsecond)
	if d := allow(t, m, req); !d.Replayed || d.Remaining != 9 {
		t.Fatalf("within the replay TTL: %+v; want replayed, 9 remaining", d)
	}
	clock.Advance(time.Microsecond)
	if d := allow(t, m, req); !d.Allowed || d.Replayed || d.Remaining != 8 {
		t.Fatalf("after the replay TTL: %+v; want judged afresh, 8 remaining", d)
	}
}

func TestMemoryReplaysOff(t *testing.T) {
	m := newMemory(t, store.WithMaxReplays(0))
	req := tollgate.Request{Key: "k", Limit: tollgate.PerHour(10), RequestID: "r1"}
	for i := range 3 {
		if d := allow(t, m, req); d.Replayed || d.Remaining != int64(8-i)+1 {
			t.Fatalf("call %d with ids off: %+v; want debited", i, d)
		}
	}
}

func TestMemoryCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newMemory(t).Allow(ctx, tollgate.Request{Key: "k", Limit: tollgate.PerSecond(1)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}

// Many goroutines on many keys at once: each key admits exactly its quota,
// whichever shard it lands in.
func TestMemoryConcurrentKeys(t *testing.T) {
	m := newMemory(t)
	const keys, perKey, quota = 64, 40, 25
	admitted := make([]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range keys * perKey / 32 {
				k := (g + i) % keys
				d := allow(t, m, tollgate.Request{Key: fmt.Sprint("key", k), Limit: tollgate.PerHour(quota)})
				if d.Allowed {
					mu.Lock()
					admitted[k]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for k, n := range admitted {
		if n != quota {
			t.Fatalf("key %d admitted %d; want exactly %d", k, n, quota)
		}
	}
}

// BenchmarkMemoryAllow measures one decision, on one hot key and spread over
// many keys (and so over the shards), from parallel callers.
func BenchmarkMemoryAllow(b *testing.B) {
	for _, keys := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			m := newMemory(b)
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("bench", i)
			}
			limit := tollgate.PerSecond(1_000_000) // the fastest limit there is: mostly admitted
			if _, err := m.Allow(context.Background(), tollgate.Request{Key: names[0], Limit: limit}); err != nil {
				b.Fatal(err)
			}
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := 0
				for pb.Next() {
					if _, err := m.Allow(ctx, tollgate.Request{Key: names[i%keys], Limit: limit}); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

func TestMemoryMarkerFollowsReplayTTL(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, store.WithClock(clock.Now), store.WithReplayTTL(10*time.Second))
	// 1.402001s is kept 1.5s, rounded up to a tenth of a second as in Redis.
	req := tollgate.Request{Key: "k", Limit: tollgate.PerHour(10), RequestID: "id", ReplayTTL: 1402*time.Millisecond + time.Microsecond}
	if d := allow(t, m, req); !d.Allowed || d.Replayed {
		t.Fatalf("first call: %+v", d)
	}
	clock.Advance(1500*time.Millisecond - time.Microsecond)
	if d := allow(t, m, req); !d.Replayed {
		t.Fatalf("within the ReplayTTL: %+v, want replayed", d)
	}
	clock.Advance(time.Microsecond)
	if d := allow(t, m, req); d.Replayed || d.Remaining != 8 {
		t.Fatalf("at the ReplayTTL: %+v, want judged afresh (8 remaining)", d)
	}
	// Longer than the store's: the store's.
	req.RequestID, req.ReplayTTL = "id-2", time.Hour
	allow(t, m, req)
	clock.Advance(10*time.Second - time.Microsecond)
	if d := allow(t, m, req); !d.Replayed {
		t.Fatalf("within the store's replay TTL: %+v, want replayed", d)
	}
	clock.Advance(time.Microsecond)
	if d := allow(t, m, req); d.Replayed {
		t.Fatalf("at the store's replay TTL: %+v, want judged afresh", d)
	}
}
