package store

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// A peek whose connection is killed under it (CLIENT KILL while the peek
// waits on a server whose writes are paused) is asked again: a peek writes
// nothing, so the caller gets its answer, not the lost connection.
func TestPeekSurvivesAKilledConnection(t *testing.T) {
	srv := redistest.Start(t) // private: its writes are paused and its clients killed
	admin := srv.Client(t)
	st := newRedis(t, srv.Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 10, Period: time.Minute}
	if _, err := st.Allow(ctx, tollgate.Request{Key: "looked-at", Limit: lim, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "5000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		d   tollgate.Decision
		err error
	}
	done := make(chan answer, 1)
	go func() {
		d, err := st.Peek(ctx, tollgate.Request{Key: "looked-at", Limit: lim, Cost: 1})
		done <- answer{d, err}
	}()
	// The peek's script waits, postponed by the pause, until it is killed.
	deadline := time.Now().Add(5 * time.Second)
	for srv.Info(t, "clients", "blocked_clients") == "0" {
		if time.Now().After(deadline) {
			t.Fatal("the peek never reached the paused server")
		}
		time.Sleep(time.Millisecond)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("peek after its connection was killed: %v; want it asked again", a.err)
	}
	if !a.d.Allowed || a.d.Remaining != 6 {
		t.Fatalf("peek after its connection was killed: %+v; want admitted with 6 remaining", a.d)
	}
}
