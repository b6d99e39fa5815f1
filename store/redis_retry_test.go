package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// resendingClient returns a client of srv, closed when the test ends, that
// gives up reading a reply after 100ms and then re-sends the command up to 3
// times: a reply delayed past that (srv.Sleep) makes it send copies.
func resendingClient(t *testing.T, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:            srv.Addr(),
		ReadTimeout:     100 * time.Millisecond,
		MaxRetries:      3,
		MinRetryBackoff: 10 * time.Millisecond,
		MaxRetryBackoff: 30 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRetryGuardStopsDoubleDebit delays a decision's reply past the client's
// ReadTimeout so that go-redis re-sends the script while the first copy waits
// in Redis, and counts the debits: with the guard the copies debit once;
// without it (kept as the demonstration) every copy debits.
func TestRetryGuardStopsDoubleDebit(t *testing.T) {
	srv := redistest.Start(t) // private: the server is put to sleep and its stats read
	ctx := context.Background()
	const capacity = 10
	for _, guard := range []bool{true, false} {
		c := resendingClient(t, srv)
		// Open idle connections now: a re-send on a new connection would
		// wait for its handshake on the frozen server and fail instead.
		var conns []*redis.Conn
		for range 6 {
			cn := c.Conn()
			if err := cn.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, cn)
		}
		for _, cn := range conns {
			_ = cn.Close()
		}
		st := NewRedis(c, WithPrefix(redistest.KeyPrefix(t)), WithRetryGuard(guard))
		req := tollgate.Request{Key: "k", Limit: quotaLimit(tollgate.TokenBucket, capacity)}
		// Load the script, so that every copy below is an EVALSHA that runs.
		if _, err := st.Allow(ctx, tollgate.Request{Key: "warm-up", Limit: req.Limit}); err != nil {
			t.Fatal(err)
		}
		before, _, _ := commandStats(t, srv, "evalsha")

		woke := srv.Sleep(t, 400*time.Millisecond)
		d, err := st.Allow(ctx, req)
		if err := <-woke; err != nil {
			t.Fatalf("DEBUG SLEEP: %v", err)
		}
		if err != nil {
			t.Fatalf("guard %v: decision over re-sends: %v", guard, err)
		}
		after, _, _ := commandStats(t, srv, "evalsha")
		copies := after - before
		if copies < 2 {
			t.Fatalf("guard %v: the script ran %d time(s): the client did not re-send, the test proves nothing", guard, copies)
		}

		probe, err := st.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		debits := capacity - 1 - probe.Remaining
		t.Logf("guard %v: one decision, %d copies of the script ran, %d debited; the caller saw %+v", guard, copies, debits, d)
		if guard {
			if debits != 1 || !d.Allowed || d.Remaining != capacity-1 {
				t.Errorf("with the guard: %d debits and decision %+v, want 1 debit and the first copy's answer (%d remaining)", debits, d, capacity-1)
			}
		} else if debits <= 1 {
			t.Errorf("without the guard: %d debits from %d copies, want more than 1: the double debit did not show", debits, copies)
		}
	}
}

// TestRetryGuardNonceLivesPastDeadlineOnly checks that a decision under a
// short context deadline stores its nonce for about that deadline plus the
// margin, not for the client's whole retry span.
func TestRetryGuardNonceLivesPastDeadlineOnly(t *testing.T) {
	c := redistest.Single(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	st := NewRedis(c, WithPrefix(prefix))
	if on, span := st.RetryGuard(); !on || span < 10*time.Second {
		t.Fatalf("RetryGuard() = %v, %s for a default client; want on with a span of tens of seconds", on, span)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: tollgate.PerSecond(5)}); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(context.Background(), prefix+"*:n:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("nonce keys %q, %v; want one", keys, err)
	}
	ttl := c.PTTL(context.Background(), keys[0]).Val()
	if ttl <= 0 || ttl > 200*time.Millisecond+retryGuardMargin {
		t.Fatalf("nonce %s lives %s, want at most the 200ms deadline plus %s", keys[0], ttl, retryGuardMargin)
	}
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
		if want := capacity * (1 + DefaultMaxReplays); allowed != want || replayed != capacity*DefaultMaxReplays {
			t.Errorf("%s: 100 calls reusing one id: %d allowed (%d replayed), want %d allowed: %d debits × (1 + %d replays)",
				alg, allowed, replayed, want, capacity, DefaultMaxReplays)
		}
	}
}

func TestRedisRequestIDReplaysSingle(t *testing.T) {
	requestIDReplays(t, NewRedis(redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t))))
}

func TestRedisRequestIDReplaysCluster(t *testing.T) {
	requestIDReplays(t, NewRedis(redistest.SharedCluster(t).Client(t), WithPrefix(redistest.KeyPrefix(t))))
}
