package store

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// A read whose connection is killed under it (CLIENT KILL while the read
// waits on a server whose writes are paused) is asked again: a peek, a
// count of seats and a look at a share write nothing, so the caller gets
// its answer, not the lost connection.
func TestReadsSurviveAKilledConnection(t *testing.T) {
	srv := redistest.Start(t) // private: its writes are paused and its clients killed
	admin := srv.Client(t)
	st := newRedis(t, srv.Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 10, Period: time.Minute}
	if _, err := st.Allow(ctx, tollgate.Request{Key: "looked-at", Limit: lim, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if d, err := st.AcquireSeat(ctx, tollgate.Seat{Key: "seated", Max: 5, ID: id, TTL: time.Minute}); err != nil || !d.Allowed {
			t.Fatalf("seat %s: %+v, %v", id, d, err)
		}
	}
	share := tollgate.Share{Key: "shared", Member: "m1", Limit: 100, Demand: 10, TTL: time.Minute}
	if _, err := st.Share(ctx, share); err != nil {
		t.Fatal(err)
	}
	var peeked tollgate.Decision
	var seats int64
	var look tollgate.ShareGrant
	type read struct {
		name  string
		read  func() error
		check func(t *testing.T)
	}
	reads := []read{
		{"peek", func() (err error) {
			peeked, err = st.Peek(ctx, tollgate.Request{Key: "looked-at", Limit: lim, Cost: 1})
			return err
		}, func(t *testing.T) {
			if !peeked.Allowed || peeked.Remaining != 6 {
				t.Fatalf("peek: %+v; want admitted with 6 remaining", peeked)
			}
		}},
		{"seats in use", func() (err error) {
			seats, err = st.SeatsInUse(ctx, "seated")
			return err
		}, func(t *testing.T) {
			if seats != 2 {
				t.Fatalf("seats in use: %d, want 2", seats)
			}
		}},
		{"look share", func() (err error) {
			look, err = st.LookShare(ctx, "shared", 0, share.TTL)
			return err
		}, func(t *testing.T) {
			if look.Members != 1 {
				t.Fatalf("look share: %+v, want one member", look)
			}
		}},
	}
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			if err := admin.Do(ctx, "CLIENT", "PAUSE", "5000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- r.read() }()
			// The read's script waits, postponed by the pause, until it is killed.
			deadline := time.Now().Add(5 * time.Second)
			for srv.Info(t, "clients", "blocked_clients") == "0" {
				if time.Now().After(deadline) {
					t.Fatal("the read never reached the paused server")
				}
				time.Sleep(time.Millisecond)
			}
			if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s after its connection was killed: %v; want it asked again", r.name, err)
			}
			r.check(t)
		})
	}
}
