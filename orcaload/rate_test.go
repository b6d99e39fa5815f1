package orcaload

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/store"
)

// The load of a server whose one seat is taken and that sheds every other
// call: utilization 2 (the next call would wait), and the calls shed in
// the last second as errors per second.
func TestShedCallsAreErrors(t *testing.T) {
	st, err := store.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	l, err := engine.New(st, engine.Config{Overload: &overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1,
		ProbeInterval: -1, MaxWait: time.Millisecond, Target: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	call := func() engine.Verdict {
		return l.Begin(context.Background(), engine.Call{Method: "/x.Y/Z", Header: keyfunc.HTTPHeader(nil)})
	}
	held := call()
	if err := held.Err(); err != nil {
		t.Fatal(err)
	}
	defer held.End(nil, nil)
	now := time.Unix(1000, 0)
	p := &provider{l: l, now: func() time.Time { return now }}
	if sm := p.ServerMetrics(); sm.AppUtilization != 2 || sm.EPS != 0 {
		t.Fatalf("before any call was shed: %+v, want utilization 2 and no errors", sm)
	}
	for range 20 {
		if v := call(); v.Kind() != engine.Shed {
			t.Fatalf("a call with the one seat taken: %v, want it shed", v.Err())
		}
	}
	now = now.Add(500 * time.Millisecond)
	if sm := p.ServerMetrics(); sm.EPS != 0 {
		t.Fatalf("within the rate's second: EPS %v, want the last second's (none yet)", sm.EPS)
	}
	now = now.Add(500 * time.Millisecond)
	if sm := p.ServerMetrics(); sm.EPS != 20 {
		t.Fatalf("a second after: EPS %v, want 20", sm.EPS)
	}
}
