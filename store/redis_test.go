package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store/storetest"
)

// TestMain stops the Redis servers the tests started and checks for leaked
// goroutines.
func TestMain(m *testing.M) { redistest.Main(m) }

// algorithms lists every algorithm, for tests that must hold for each.
var algorithms = []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow}

// quotaLimit admits exactly n and then nothing for the rest of any test:
// its period is the longest allowed, so no refill and no window boundary
// falls inside a test run (the odds of a fixed window boundary within a
// second of a test are one in 600,000).
func quotaLimit(alg tollgate.Algorithm, n int64) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: n, Period: tollgate.MaxPeriod, Burst: n}
}

// realClockSlack is how much later than planned a step may run on a busy
// machine under the race detector; storetest checks durations within it and
// sizes its limits from it (10× Slack per time unit).
const realClockSlack = 30 * time.Millisecond

// forEachRedis runs test on the shared single node and on the shared
// Cluster, as subtests "single" and "cluster", each with a client of its
// own (clientsLike makes more).
func forEachRedis(t *testing.T, test func(t *testing.T, c redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { test(t, redistest.Single(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { test(t, redistest.SharedCluster(t).Client(t)) })
}

// forEachPrivateRedis runs test on a single node and on a Cluster of 3
// primaries started for it, which it may flush, pause or stop: nodes are
// the servers behind c.
func forEachPrivateRedis(t *testing.T, test func(t *testing.T, c redis.UniversalClient, nodes []*redistest.Server)) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		test(t, srv.Client(t), []*redistest.Server{srv})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, 0)
		test(t, cl.Client(t), cl.Nodes)
	})
}

// clientsLike returns n new clients of the deployment c serves, each with
// a connection pool of its own, closed when the test ends.
func clientsLike(t *testing.T, c redis.UniversalClient, n int) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, n)
	for i := range out {
		switch c := c.(type) {
		case *redis.Client:
			out[i] = redis.NewClient(c.Options())
		case *redis.ClusterClient:
			out[i] = redis.NewClusterClient(c.Options())
		default:
			t.Fatalf("clientsLike: a %T", c)
		}
		t.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}

// TestRedisConformance runs the conformance suite on the real clock.
func TestRedisConformance(t *testing.T) {
	t.Parallel() // the suite mostly sleeps on the real clock
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		storetest.Run(t, storetest.Harness{
			Store:      newRedis(t, c, WithPrefix(redistest.KeyPrefix(t))),
			Advance:    redistest.Elapse, // Redis's clock
			Slack:      realClockSlack,
			MaxReplays: defaultMaxReplays,
		})
	})
}

// TestRedisConformanceExact runs the suite with exactness paid on a
// primary without a replica (ExactAlways): every call writes its slot's
// lineage and is journaled, and answers as without.
func TestRedisConformanceExact(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithExactness(ExactAlways))
		storetest.Run(t, storetest.Harness{
			Store:      st,
			Advance:    redistest.Elapse, // Redis's clock
			Slack:      realClockSlack,
			MaxReplays: defaultMaxReplays,
		})
		if s := st.Stats(); s.ExactPrimaries == 0 || s.ExactPrimaries != s.Primaries {
			t.Errorf("%d of %d primaries exact, want every one", s.ExactPrimaries, s.Primaries)
		}
	})
}

// TestRedisConformanceTagged runs the suite on the tagged key layout
// (WithClusterTags), where a Cluster shares batch script calls between
// the identities behind one shared tag.
func TestRedisConformanceTagged(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		storetest.Run(t, storetest.Harness{
			Store:      newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithClusterTags(6)),
			Advance:    redistest.Elapse, // Redis's clock
			Slack:      realClockSlack,
			MaxReplays: defaultMaxReplays,
		})
	})
}

func TestRedisQuotaThenDenial(t *testing.T) {
	st := newRedis(t, redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	for _, alg := range algorithms {
		req := tollgate.Request{Key: "user", Limit: quotaLimit(alg, 3)}
		for want := int64(2); want >= 0; want-- {
			d, err := st.Allow(ctx, req)
			if err != nil {
				t.Fatalf("%s: %v", alg, err)
			}
			if !d.Allowed || d.Remaining != want || d.RetryAfter != 0 || d.Replayed {
				t.Fatalf("%s: %+v, want allowed with %d remaining", alg, d, want)
			}
		}
		d, err := st.Allow(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.ResetAfter <= 0 {
			t.Fatalf("%s: %+v, want denied with a wait", alg, d)
		}
	}
}

func TestRedisInvalidRequestNeverReachesRedis(t *testing.T) {
	// Nothing listens on port 1: a request that reached the client would fail
	// with a dial error, not a validation error.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	st := newRedis(t, c)
	for _, req := range []tollgate.Request{
		{Key: "k", Limit: tollgate.Limit{Rate: 0, Period: time.Second}},
		{Key: "k", Limit: tollgate.PerSecond(5), Cost: 6},
		{Key: "k", Limit: tollgate.PerSecond(5), Cost: -1},
		{Key: strings.Repeat("k", tollgate.MaxKeyLen+1), Limit: tollgate.PerSecond(5)},
		{Key: "k", Limit: tollgate.PerSecond(5), RequestID: "has space"},
	} {
		_, err := st.Allow(context.Background(), req)
		if !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("Allow(%+v) = %v, want an error wrapping ErrInvalidRequest", req.Limit, err)
		}
	}
}

func TestRedisErrorsSayWhereAndAreNotInvalidRequest(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	st := newRedis(t, c)
	srv.Stop(t)
	_, err := st.Allow(context.Background(), tollgate.Request{Key: "k", Limit: tollgate.PerSecond(5)})
	if err == nil {
		t.Fatal("Allow succeeded with Redis stopped")
	}
	if errors.Is(err, tollgate.ErrInvalidRequest) || !strings.HasPrefix(err.Error(), "tollgate: redis store: ") {
		t.Fatalf("Allow with Redis stopped = %q, want a \"tollgate: redis store: \" error not wrapping ErrInvalidRequest", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv.Restart(t)
	if _, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: tollgate.PerSecond(5)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Allow with a canceled context = %v, want an error wrapping context.Canceled", err)
	}
}

// commandStats returns calls, failed and rejected calls of one command from
// srv's INFO commandstats.
func commandStats(t *testing.T, srv *redistest.Server, cmd string) (calls, failed, rejected int64) {
	t.Helper()
	for _, field := range strings.Split(srv.Info(t, "commandstats", "cmdstat_"+cmd), ",") {
		name, value, _ := strings.Cut(field, "=")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "calls":
			calls = n
		case "failed_calls":
			failed = n
		case "rejected_calls":
			rejected = n
		}
	}
	return calls, failed, rejected
}

func TestRedisFirstCallAfterScriptFlush(t *testing.T) {
	srv := redistest.Start(t) // private: the command counts must be this test's alone
	c := srv.Client(t)
	// No journal: its reads of INFO could open a connection, which loads
	// the scripts again after the flush.
	st := newRedis(t, c, WithJournal(0))
	ctx := context.Background()
	req := tollgate.Request{Key: "k", Limit: quotaLimit(tollgate.GCRA, 10)}
	if _, err := st.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st.persistence.started.Load() {
		// Its reads take a connection of the pool too: once it is done,
		// the next call finds the one it used, opened before the flush.
		<-st.persistence.done
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	shaCalls, shaFailed, shaRejected := commandStats(t, srv, "evalsha")
	evalCalls, _, _ := commandStats(t, srv, "eval")
	d, err := st.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("first decision after SCRIPT FLUSH = %+v, %v; want allowed with 8 remaining", d, err)
	}
	shaCalls2, shaFailed2, shaRejected2 := commandStats(t, srv, "evalsha")
	evalCalls2, _, _ := commandStats(t, srv, "eval")
	// Redis counts an EVALSHA answered NOSCRIPT as a call that failed.
	if shaCalls2-shaCalls != 1 || (shaFailed2+shaRejected2)-(shaFailed+shaRejected) != 1 {
		t.Errorf("EVALSHA ran %d times and failed %d times, want 1 and 1 (NOSCRIPT)",
			shaCalls2-shaCalls, (shaFailed2+shaRejected2)-(shaFailed+shaRejected))
	}
	if evalCalls2-evalCalls != 1 {
		t.Errorf("EVAL ran %d times, want 1 (the fallback after NOSCRIPT)", evalCalls2-evalCalls)
	}
	if n := st.Stats().NoScript; n != 1 {
		t.Errorf("Stats().NoScript = %d, want 1", n)
	}
	// The fallback loaded the script: the next call is an EVALSHA alone.
	if _, err := st.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	if evalCalls3, _, _ := commandStats(t, srv, "eval"); evalCalls3 != evalCalls2 {
		t.Errorf("EVAL ran again after the script was loaded")
	}
}

func TestRedisThroughSentinelFailoverClient(t *testing.T) {
	primary := redistest.Start(t)
	sentinel := redistest.Sentinel(t, primary)
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    redistest.SentinelMaster,
		SentinelAddrs: []string{sentinel.Addr()},
	})
	defer c.Close()
	st := newRedis(t, c)
	ctx := context.Background()
	for want := int64(2); want >= 0; want-- {
		d, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: quotaLimit(tollgate.GCRA, 3)})
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Fatalf("decision through Sentinel = %+v, %v; want allowed with %d remaining", d, err, want)
		}
	}
	if n := len(scanKeys(t, primary.Client(t), defaultPrefix)); n == 0 {
		t.Fatal("no keys on the primary Sentinel names")
	}
	// A set is one script call through Sentinel, whatever its keys' tags.
	counter := &scriptCounter{}
	c.AddHook(counter)
	set := []tollgate.Request{{Key: "a", Limit: quotaLimit(tollgate.TokenBucket, 1)}, {Key: "b", Limit: quotaLimit(tollgate.FixedWindow, 1)}}
	for i, want := range []bool{true, false} {
		ds, err := st.AllowAll(ctx, set)
		if err != nil || ds[0].Allowed != want || ds[1].Allowed != want {
			t.Fatalf("set %d through Sentinel = %+v, %v; want allowed %v", i, ds, err, want)
		}
	}
	if n := counter.calls.Load(); n < 2 || n > 3 { // a first EVALSHA may be answered NOSCRIPT
		t.Fatalf("two sets through Sentinel took %d script calls, want 2 (3 with a NOSCRIPT)", n)
	}
}
