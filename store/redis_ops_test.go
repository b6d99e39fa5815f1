package store

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/internal/redistest"
)

// decisionMix runs, on every algorithm, admissions and denials with and
// without request ids (including replays), through st.
func decisionMix(t *testing.T, st *Redis) {
	t.Helper()
	ctx := context.Background()
	for _, alg := range algorithms {
		for _, limit := range []tollgate.Limit{
			quotaLimit(alg, 2),
			{Algorithm: alg, Rate: 3, Period: 2 * time.Second, Burst: 3},
		} {
			for i := range 4 {
				for _, id := range []string{"", "id-" + strconv.Itoa(i%2)} {
					if _, err := st.Allow(ctx, tollgate.Request{Key: "mix-" + alg.String(), Limit: limit, RequestID: id}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// scanKeys returns every key under prefix on c.
func scanKeys(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, prefix+"*", 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkEveryKeyExpires fails the test for any key under prefix on c without
// a TTL, and returns how many keys of each kind (state, :r:) it saw.
func checkEveryKeyExpires(t *testing.T, c *redis.Client, prefix string) (state, ids int) {
	t.Helper()
	for _, k := range scanKeys(t, c, prefix) {
		ttl, err := c.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -1 {
			t.Errorf("key %q has no TTL", k)
		}
		if strings.Contains(k, ":r:") {
			ids++
		} else {
			state++
		}
	}
	return state, ids
}

func TestRedisEveryKeyExpires(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t)
		decisionMix(t, newRedis(t, c, WithPrefix(prefix)))
		var state, ids int
		primaries := primariesOf(t, c)
		for _, c := range primaries {
			s, i := checkEveryKeyExpires(t, c, prefix)
			state, ids = state+s, ids+i
		}
		if state == 0 || ids == 0 {
			t.Fatalf("saw %d state and %d request-id keys on %d primaries; want some of each", state, ids, len(primaries))
		}
	})
}

// primariesOf returns the node c is, or on a Cluster its primaries.
func primariesOf(t *testing.T, c redis.UniversalClient) []*redis.Client {
	t.Helper()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return []*redis.Client{c.(*redis.Client)}
	}
	// ForEachMaster runs its function on other goroutines, where the test
	// must not fail: collect the primaries, then check each here.
	var mu sync.Mutex
	var primaries []*redis.Client
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		primaries = append(primaries, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return primaries
}

// hostileIdentities are identities that break naive key building: braces
// that would move the hash tag, the empty tag, bytes that are not text, a
// huge identity, and pairs whose naive or escaped names would collide.
func hostileIdentities() []string {
	return []string{
		"{", "}", "{}", "{}{}", "}{", "", "\x00", "\xff\xfe\x00binary\r\n",
		strings.Repeat("{}", 30<<10), // 60 KiB
		"a", "a}b", "{a}", "a}",      // naive "{a}b}" and "{{a}}" hash like "a"
		"x", "x}:tb",
		"%7B", "%257B", "%", // escaped forms of "{" and of each other
		"#47DEQpj8HBSa-_TImW-5JA", // the hashed tag of ""
		strings.Repeat("a", 64), strings.Repeat("a", 65),
		"user:1", "user:1:tb", "user:1}:tb", "user:1\x00",
	}
}

func TestRedisHostileIdentitiesCluster(t *testing.T) {
	st := newRedis(t, redistest.SharedCluster(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	identities := hostileIdentities()
	for _, alg := range algorithms {
		limit := quotaLimit(alg, 5)
		// Each round debits every identity once; shared state between any
		// two would show as one debit too many.
		for round := int64(1); round <= 3; round++ {
			for _, id := range identities {
				d, err := st.Allow(ctx, tollgate.Request{Key: id, Limit: limit, RequestID: "r" + strconv.FormatInt(round, 10)})
				if err != nil {
					t.Fatalf("%s identity %.40q: %v", alg, id, err)
				}
				if !d.Allowed || d.Remaining != 5-round {
					t.Fatalf("%s identity %.40q round %d: %+v, want allowed with %d remaining", alg, id, round, d, 5-round)
				}
			}
		}
	}
	// Parts of a hostile identity, and hostile parts, with a request id:
	// one slot per identity, one script call, distinct state per part.
	for _, id := range identities {
		set := []tollgate.Request{
			{Key: partkey.Join(id, "a"), Limit: quotaLimit(tollgate.TokenBucket, 3), RequestID: "set"},
			{Key: partkey.Join(id, "}{\x00%7B\x1f"), Limit: quotaLimit(tollgate.TokenBucket, 4), RequestID: "set"},
			{Key: partkey.Join(id, "a:r:x"), Limit: quotaLimit(tollgate.TokenBucket, 5), RequestID: "set"},
		}
		ds, err := st.AllowAll(ctx, set)
		if err != nil {
			t.Fatalf("parts of identity %.40q: %v", id, err)
		}
		for i, want := range []int64{2, 3, 4} {
			if !ds[i].Allowed || ds[i].Remaining != want {
				t.Fatalf("parts of identity %.40q: %+v, want each part admitted on its own state", id, ds)
			}
		}
	}
}

func TestRedisReplicaMatchesPrimaryByteForByte(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Replica(t, primary)
	pc, rc := primary.Client(t), replica.Client(t)
	decisionMix(t, newRedis(t, pc))
	ctx := context.Background()
	awaitAcknowledged(t, primary, "ops:synced") // outside the store's prefix: not compared
	keys := scanKeys(t, pc, defaultPrefix)
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	for _, k := range keys {
		pd, perr := pc.Dump(ctx, k).Result()
		rd, rerr := rc.Dump(ctx, k).Result()
		pe, re := pc.PExpireTime(ctx, k).Val(), rc.PExpireTime(ctx, k).Val()
		if perr != nil || rerr != nil || !bytes.Equal([]byte(pd), []byte(rd)) || pe != re {
			t.Errorf("key %q differs: primary DUMP %q (%v) expires %s, replica DUMP %q (%v) expires %s",
				k, pd, perr, pe, rd, rerr, re)
		}
	}
	if rk := scanKeys(t, rc, defaultPrefix); len(rk) != len(keys) {
		t.Errorf("replica has %d keys, primary %d", len(rk), len(keys))
	}
}

// flushScripts starts a goroutine, counted in wg, that flushes admin's
// script cache every 2ms until stop is closed, adding each flush to flushes.
func flushScripts(t *testing.T, admin *redis.Client, stop <-chan struct{}, wg *sync.WaitGroup, flushes *atomic.Int64) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Error(err)
				return
			}
			flushes.Add(1)
		}
	}()
}

func TestRedisScriptFlushDuringLoad(t *testing.T) {
	srv := redistest.Start(t) // private: the script cache is flushed and errors counted
	admin := srv.Client(t)
	stores := []*Redis{newRedis(t, srv.Client(t)), newRedis(t, srv.Client(t))}
	ctx := context.Background()

	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	flushScripts(t, admin, stop, &wg, &flushes)
	var decisions, failures atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			alg := algorithms[g%len(algorithms)]
			req := tollgate.Request{Key: "flush-" + strconv.Itoa(g), Limit: tollgate.PerSecond(1000)}
			req.Limit.Algorithm = alg
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := stores[g%2].Allow(ctx, req); err != nil {
					failures.Add(1)
					t.Errorf("decision during SCRIPT FLUSH: %v", err)
					return
				}
				decisions.Add(1)
			}
		}()
	}
	// Until 100 flushes have met the load, each NOSCRIPT answered recovered.
	redistest.Await(20*time.Second, func() bool {
		return failures.Load() > 0 || flushes.Load() >= 100 && srv.ErrorCount(t, "NOSCRIPT") >= 100
	})
	close(stop)
	wg.Wait()
	noscript := srv.ErrorCount(t, "NOSCRIPT")
	t.Logf("%d decisions, %d SCRIPT FLUSH, %d NOSCRIPT answered and recovered, %d errors surfaced",
		decisions.Load(), flushes.Load(), noscript, failures.Load())
	if flushes.Load() == 0 || noscript == 0 || decisions.Load() == 0 {
		t.Fatalf("%d flushes, %d NOSCRIPT, %d decisions: the flushes did not meet the load", flushes.Load(), noscript, decisions.Load())
	}
}

// TestRedisPeekWritesNothing: a Peek of a denied identity under a request
// id leaves the keyspace as it was (no marker, no settle record, the state
// not written again: its TTL is not renewed), on a single node and a
// Cluster.
func TestRedisPeekWritesNothing(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.KeyPrefix(t)
		st := newRedis(t, c, WithPrefix(prefix))
		l := tollgate.PerMinute(2)
		if _, err := st.Allow(ctx, tollgate.Request{Key: "peeked", Limit: l, Cost: 2}); err != nil {
			t.Fatal(err)
		}
		count := func() int {
			n := 0
			for _, p := range primariesOf(t, c) {
				keys, err := p.Keys(ctx, prefix+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				n += len(keys)
			}
			return n
		}
		before := count()
		// A TTL the state would never get from a write (a bucket of 2 a
		// minute is full again within a minute): a Peek that wrote the
		// state back would shorten it.
		var state string
		for _, p := range primariesOf(t, c) {
			keys, err := p.Keys(ctx, prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				state = k
				if err := p.PExpire(ctx, k, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if state == "" {
			t.Fatal("no state key after an admission")
		}
		d, err := st.Peek(ctx, tollgate.Request{Key: "peeked", Limit: l, RequestID: "look-1"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			t.Fatalf("Peek of an empty bucket allowed: %+v", d)
		}
		if after := count(); after != before {
			t.Errorf("Peek wrote %d keys", after-before)
		}
		if ttl := c.PTTL(ctx, state).Val(); ttl < 59*time.Minute {
			t.Errorf("the state's TTL is %s after Peek, want the hour set before it: Peek wrote the state", ttl)
		}
	})
}
