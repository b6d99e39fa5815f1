package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestDeadlineWithoutContextTimeouts runs decisions against a hung Redis
// through a client built with go-redis's defaults, which ignore context
// deadlines on the socket (ContextTimeoutEnabled false, ReadTimeout 5s,
// MaxRetries 3): the caller still gets its answer, the deadline error, at
// its own deadline, alone or batched, and not after the client's read
// timeouts.
func TestDeadlineWithoutContextTimeouts(t *testing.T) {
	redistest.SkipFaultShort(t)
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		opts []RedisOption
	}{
		{"batched", nil},
		{"unbatched", []RedisOption{WithBatching(0, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer client.Close()
			st := newRedis(t, client, tc.opts...)
			req := tollgate.Request{Key: redistest.KeyPrefix(t) + "hung", Limit: tollgate.PerSecond(10)}
			if _, err := st.Allow(context.Background(), req); err != nil {
				t.Fatal(err) // loads the script while Redis answers
			}
			asleep := time.Now()
			woke := srv.Sleep(t, 3*time.Second)
			wakes := asleep.Add(3 * time.Second) // at the earliest
			const deadline = 100 * time.Millisecond
			errs := make(chan error, 4)
			took := make(chan time.Duration, 4)
			for range 4 {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					start := time.Now()
					_, err := st.Allow(ctx, req)
					took <- time.Since(start)
					errs <- err
				}()
			}
			for range 4 {
				d, err := <-took, <-errs
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Allow on a hung Redis: %v, want the deadline error", err)
				}
				// Returned while Redis still slept: at its deadline, not at
				// the client's own 5s timeout nor when Redis woke (no timed
				// bound: a busy machine).
				if time.Now().After(wakes) {
					t.Errorf("Allow returned after %s, once Redis woke: not bounded by its %s deadline", d, deadline)
				}
			}
			if err := <-woke; err != nil {
				t.Fatal(err)
			}
			// The abandoned script calls finish once Redis wakes; the next
			// decision works as usual.
			if _, err := st.Allow(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEveryCallBoundedWithoutContextTimeouts calls every store operation
// that reaches Redis (decisions, sets, peeks, settlements, overdraws, every
// seat operation, the one-step seat and settle operations, Reset) through
// a client on go-redis's default options while Redis is paused (CLIENT
// PAUSE 3000): each returns the deadline error while Redis is still
// paused, not at the pause's end or the client's ReadTimeout.
// On a single node, through Sentinel, and on a 3-primary Cluster (every
// node paused).
func TestEveryCallBoundedWithoutContextTimeouts(t *testing.T) {
	redistest.SkipFaultShort(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (redis.UniversalClient, []*redistest.Server)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			srv := redistest.Start(t)
			return redis.NewClient(&redis.Options{Addr: srv.Addr()}), []*redistest.Server{srv}
		}},
		{"sentinel", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			srv := redistest.Start(t)
			sentinel := redistest.Sentinel(t, srv)
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel.Addr()}}),
				[]*redistest.Server{srv}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			c := redistest.NewClusterTimeout(t, 0, 5*time.Second)
			return redis.NewClusterClient(c.Options()), c.Nodes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, servers := tc.setup(t)
			defer client.Close()
			everyCallBounded(t, newRedis(t, client), servers)
		})
	}
}

func everyCallBounded(t *testing.T, st *Redis, servers []*redistest.Server) {
	key := redistest.KeyPrefix(t) + "bounded"
	req := tollgate.Request{Key: key, Limit: tollgate.PerSecond(1000), Cost: 10, RequestID: "r1"}
	two := []tollgate.Request{req, {Key: key + "-b", Limit: tollgate.PerSecond(1000), RequestID: "r1"}}
	seat := tollgate.Seat{Key: key, Max: 2, ID: "s1", TTL: time.Second}
	ops := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"Allow", func(ctx context.Context) error { _, err := st.Allow(ctx, req); return err }},
		{"AllowAll", func(ctx context.Context) error { _, err := st.AllowAll(ctx, two); return err }},
		{"Peek", func(ctx context.Context) error { _, err := st.Peek(ctx, req); return err }},
		{"Settle", func(ctx context.Context) error {
			_, err := st.Settle(ctx, req, tollgate.Admission{}, 3)
			return err
		}},
		{"SettleAll", func(ctx context.Context) error {
			_, err := st.SettleAll(ctx, two, make([]tollgate.Admission, 2), []int64{1, 1})
			return err
		}},
		{"Overdraw", func(ctx context.Context) error {
			o := req
			o.Overdraw, o.RequestID = true, ""
			_, err := st.Allow(ctx, o)
			return err
		}},
		{"AcquireSeat", func(ctx context.Context) error { _, err := st.AcquireSeat(ctx, seat); return err }},
		{"RenewSeat", func(ctx context.Context) error { _, err := st.RenewSeat(ctx, seat); return err }},
		{"ReleaseSeat", func(ctx context.Context) error { return st.ReleaseSeat(ctx, seat) }},
		{"SeatsInUse", func(ctx context.Context) error { _, err := st.SeatsInUse(ctx, key); return err }},
		{"AllowAllWithSeat", func(ctx context.Context) error {
			_, _, err := st.AllowAllWithSeat(ctx, seat, []tollgate.Request{req})
			return err
		}},
		{"SettleAllAndRelease", func(ctx context.Context) error {
			_, err := st.SettleAllAndRelease(ctx, []tollgate.Request{req}, []tollgate.Admission{{}}, []int64{3}, []tollgate.Seat{seat})
			return err
		}},
		{"Reset", func(ctx context.Context) error { return st.Reset(ctx, req) }},
	}
	for _, op := range ops { // loads every script while Redis answers
		if err := op.do(context.Background()); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
	}
	var ends time.Time // when the first pause ends
	for _, srv := range servers {
		if e := srv.Pause(t, 3*time.Second); ends.IsZero() || e.Before(ends) {
			ends = e
		}
	}
	const deadline = 100 * time.Millisecond
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := op.do(ctx)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a paused Redis: %v, want the deadline error", op.name, err)
			}
			// Returned while Redis was still paused: at its deadline, not
			// when Redis answered (no timed bound: a busy machine).
			if time.Now().After(ends) {
				t.Errorf("%s returned after %s, once the pause had ended: not bounded by its %s deadline", op.name, took, deadline)
			}
		})
	}
	wg.Wait()
	for _, srv := range servers {
		srv.AwaitAnswer(t, 5*time.Second)
	}
	if _, err := st.Allow(context.Background(), tollgate.Request{Key: key, Limit: tollgate.PerSecond(1000)}); err != nil {
		t.Fatal(err)
	}
}
