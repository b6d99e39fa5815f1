package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestDeadlineWithoutContextTimeouts runs decisions against a hung Redis
// through a client built with go-redis's defaults, which ignore context
// deadlines on the socket (ContextTimeoutEnabled false, ReadTimeout 3s,
// MaxRetries 3): the caller still gets its answer, the deadline error, at
// its own deadline, alone or batched, and not after the client's read
// timeouts.
func TestDeadlineWithoutContextTimeouts(t *testing.T) {
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
			st := NewRedis(client, tc.opts...)
			req := tollgate.Request{Key: redistest.KeyPrefix(t) + "hung", Limit: tollgate.PerSecond(10)}
			if _, err := st.Allow(context.Background(), req); err != nil {
				t.Fatal(err) // loads the script while Redis answers
			}
			woke := srv.Sleep(t, 1500*time.Millisecond)
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
				// The client's own timeout is 3s; 1s tells the two apart on
				// a loaded machine without timing anything finely.
				if d > time.Second {
					t.Errorf("Allow returned after %s, want about %s", d, deadline)
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
