package store

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// resendingOptions are client settings under which go-redis re-sends a
// command: it gives up reading a reply after 100ms and then sends the
// command again, up to 3 times. A reply delayed past that (Server.Sleep)
// makes it send copies of any command it may retry.
const (
	resendReadTimeout = 100 * time.Millisecond
	resendAttempts    = 3
)

// resendingClient returns a client of srv with those settings, closed when
// the test ends.
func resendingClient(t *testing.T, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:            srv.Addr(),
		ReadTimeout:     resendReadTimeout,
		MaxRetries:      resendAttempts,
		MinRetryBackoff: 10 * time.Millisecond,
		MaxRetryBackoff: 30 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// openIdleConns opens n connections on c and returns them to its pool (on
// every node of a Cluster): a call or a re-send on a new connection would
// wait for its handshake on a sleeping server and fail instead of running.
func openIdleConns(t *testing.T, c redis.UniversalClient, n int) {
	t.Helper()
	if cc, ok := c.(*redis.ClusterClient); ok {
		if err := cc.ForEachShard(context.Background(), func(_ context.Context, shard *redis.Client) error {
			openIdleConns(t, shard, n)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := c.Ping(context.Background()).Err(); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Pipelined(context.Background(), func(p redis.Pipeliner) error { return p.Ping(context.Background()).Err() }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// resendCase is one client whose replies are delayed past its ReadTimeout.
type resendCase struct {
	name   string
	client redis.UniversalClient
	// servers are the nodes that hold the keys: they are put to sleep
	// and their script runs counted.
	servers []*redistest.Server
}

// checkNeverResent delays a decision's reply past tc's ReadTimeout, so
// that go-redis gives up on it while Redis still runs it, and counts
// script runs and debits: the store's script calls run once and debit
// once, alone and in a pipeline, and the caller gets an error. The same
// script sent through go-redis's own Script.Run (kept as the
// demonstration) runs several times and debits each time.
// plainDecide is the decide script as a go-redis Script, whose calls the
// client re-sends like any command: what the store must never do.
var plainDecide = redis.NewScript(lua.Decide.Source())

func checkNeverResent(t *testing.T, tc resendCase) {
	ctx := context.Background()
	const capacity = 10
	limit := quotaLimit(tollgate.TokenBucket, capacity)
	prefix := redistest.KeyPrefix(t)
	st := newRedis(t, tc.client, WithPrefix(prefix), WithDenyCache(0))
	openIdleConns(t, tc.client, 8)
	const tag = "resend-"
	// Load the script on every node, so that every copy below runs.
	for i := range 64 {
		if _, err := st.Allow(ctx, tollgate.Request{Key: tag + "warm-up-" + strconv.Itoa(i), Limit: limit}); err != nil {
			t.Fatal(err)
		}
	}
	if st.batchScript { // and the batch script, which carries a batch here
		for _, srv := range tc.servers {
			if err := srv.Client(t).ScriptLoad(ctx, lua.Batch.Source()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	remaining := func(key string) int64 {
		t.Helper()
		d, err := st.Allow(ctx, tollgate.Request{Key: key, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining + 1 // before this probe's own debit
	}
	evalshas := func() (n int64) {
		for _, srv := range tc.servers {
			calls, _, _ := commandStats(t, srv, "evalsha")
			n += calls
		}
		return n
	}
	asleep := func(run func()) (runs int64) {
		t.Helper()
		openIdleConns(t, tc.client, 8) // the timed-out calls before closed theirs
		before := evalshas()
		woke := redistest.SleepAll(t, tc.servers, 400*time.Millisecond)
		run()
		for _, w := range woke {
			if err := <-w; err != nil {
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
		}
		return evalshas() - before
	}

	// The demonstration: a script go-redis may retry runs several times.
	keys := decisionKeys(prefix, tollgate.TokenBucket, tag+"plain", "")
	keys = append(keys, st.keys.lineage.of(keys[0]))
	runs := asleep(func() {
		argv := []any{"", modeNoID, int64(tollgate.TokenBucket), capacity, limit.Period.Microseconds(), capacity, 1}
		_ = plainDecide.EvalSha(ctx, tc.client, keys, argv...).Err()
	})
	debits := capacity - remaining(tag+"plain")
	t.Logf("%s: EVALSHA through go-redis: %d runs, %d debits", tc.name, runs, debits)
	if runs < 2 || debits != runs {
		t.Fatalf("%s: a retried EVALSHA ran %d time(s) and debited %d: the client did not re-send, the test proves nothing", tc.name, runs, debits)
	}

	// A decision alone, on the caller's goroutine. Should the call time
	// out before its script is sent (a connection, or the store's reading
	// of the node, waiting on the sleeping node), nothing ran, nothing was
	// resent, and the case proves nothing; it is tried again, with a key
	// of its own, up to three times.
	var err error
	for attempt := 1; ; attempt++ {
		key := tag + "alone-" + strconv.Itoa(attempt)
		runs = asleep(func() { _, err = st.Allow(ctx, tollgate.Request{Key: key, Limit: limit}) })
		debits = capacity - remaining(key)
		t.Logf("%s: one decision, attempt %d: %d run, %d debit, error %v", tc.name, attempt, runs, debits, err)
		if runs == 0 && debits == 0 && err != nil && attempt < 3 {
			continue
		}
		break
	}
	if err == nil || runs != 1 || debits != 1 {
		t.Errorf("%s: a decision whose reply was late: %d runs, %d debits, error %v; want 1 run, 1 debit and an error", tc.name, runs, debits, err)
	}

	// The demonstration for pipelines: go-redis re-sends a whole pipeline.
	runs = asleep(func() {
		_, _ = tc.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range 3 {
				keys := decisionKeys(prefix, tollgate.TokenBucket, tag+"plain-batch-"+strconv.Itoa(i), "")
				plainDecide.EvalSha(ctx, p, keys, "", modeNoID, int64(tollgate.TokenBucket), capacity, limit.Period.Microseconds(), capacity, 1)
			}
			return nil
		})
	})
	t.Logf("%s: pipeline of 3 EVALSHA through go-redis: %d runs", tc.name, runs)
	if runs < 6 {
		t.Fatalf("%s: a retried pipeline of 3 ran %d scripts: the client did not re-send it, the test proves nothing", tc.name, runs)
	}

	// Nine decisions in one pipeline.
	var batch []*call
	for i := range 9 {
		req, err := check.Normalize(tollgate.Request{Key: tag + "batch-" + strconv.Itoa(i), Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, st.keys.decisionCall(ctx, req, decideMode{}))
	}
	runs = asleep(func() { st.runBatch(batch) })
	want := int64(9) // one decide call each; one batch script call for all where the store sends one
	if st.batchScript {
		want = 1
	}
	if runs != want {
		t.Errorf("%s: a pipeline of 9 decisions whose replies were late ran %d scripts, want %d", tc.name, runs, want)
	}
	for i, c := range batch {
		<-c.done
		if c.err == nil {
			t.Errorf("%s: decision %d in the late pipeline has no error", tc.name, i)
		}
		if debits := capacity - remaining(tag+"batch-"+strconv.Itoa(i)); debits != 1 {
			t.Errorf("%s: decision %d in the late pipeline debited %d times, want 1", tc.name, i, debits)
		}
	}
}

func TestScriptCallsAreNeverResent(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t) // private: the server is put to sleep and its stats read
		checkNeverResent(t, resendCase{name: "client MaxRetries 3", client: resendingClient(t, srv), servers: []*redistest.Server{srv}})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewClusterTimeout(t, 0, 5*time.Second) // private: its nodes are put to sleep
		o := cl.Options()
		// A ClusterClient re-sends a timed-out command up to MaxRedirects
		// times (MaxRetries is off for it by default).
		o.ReadTimeout, o.MaxRedirects = resendReadTimeout, resendAttempts
		o.MinRetryBackoff, o.MaxRetryBackoff = 10*time.Millisecond, 30*time.Millisecond
		cc := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = cc.Close() })
		checkNeverResent(t, resendCase{name: "cluster MaxRedirects 3", client: cc, servers: cl.Nodes})
	})
}

// requestIDReplays checks on st that retries carrying one request id are
// debited once, and that reusing an id cannot buy more than 1+MaxReplays
// calls per admission.
func requestIDReplays(t *testing.T, st *Redis) {
	ctx := context.Background()
	const capacity = 10
	for _, alg := range algorithms {
		limit := quotaLimit(alg, capacity)
		req := tollgate.Request{Key: "retries", Limit: limit, RequestID: "call-1"}
		for attempt := range 5 {
			d, err := st.Allow(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Replayed != (attempt > 0) || d.Remaining != capacity-1 {
				t.Fatalf("%s: attempt %d = %+v, want allowed with %d remaining, replayed after the first", alg, attempt+1, d, capacity-1)
			}
		}
		if d, _ := st.Allow(ctx, tollgate.Request{Key: "retries", Limit: limit}); d.Remaining != capacity-2 {
			t.Fatalf("%s: after 5 attempts with one id and one call without: %d remaining, want %d (one debit each)", alg, d.Remaining, capacity-2)
		}

		reuse := tollgate.Request{Key: "reuse", Limit: limit, RequestID: "same-id"}
		var allowed, replayed int
		for range 100 {
			d, err := st.Allow(ctx, reuse)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
			if d.Replayed {
				replayed++
			}
		}
		// Each admission debits 1 and replays MaxReplays times.
		if want := capacity * (1 + defaultMaxReplays); allowed != want || replayed != capacity*defaultMaxReplays {
			t.Errorf("%s: 100 calls reusing one id: %d allowed (%d replayed), want %d allowed: %d debits × (1 + %d replays)",
				alg, allowed, replayed, want, capacity, defaultMaxReplays)
		}
	}
}

func TestRedisRequestIDReplays(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		requestIDReplays(t, newRedis(t, c, WithPrefix(redistest.KeyPrefix(t))))
	})
}
