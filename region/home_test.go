package region

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
)

func newRedisHome(t *testing.T, c redis.UniversalClient) Home {
	t.Helper()
	h, err := NewRedisHome(c, redistest.KeyPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHomeNeverGrantsWhatAnotherHolds has one region take the whole pool
// once the Home has settled: the other is granted only its floor until
// the first's lease ends (on the Home's clock), or until the first asks
// less itself.
func TestHomeNeverGrantsWhatAnotherHolds(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	homes := map[string]struct {
		home    Home
		advance func(time.Duration)
	}{
		"memory": {NewMemoryHome(clock.Now), clock.Advance},
		"redis":  {newRedisHome(t, redistest.Single(t).Client(t)), redistest.Elapse}, // Redis's clock
	}
	limit := normalize(tollgate.PerSecond(600))
	const lease = 300 * time.Millisecond
	for name, h := range homes {
		t.Run(name, func(t *testing.T) {
			seq := int64(0)
			ask := func(region string, demand, hold int64, lease time.Duration) tollgate.ShareGrant {
				t.Helper()
				seq++
				rep, err := h.home.Share(context.Background(), []tollgate.Share{{Key: shareKey("k", limit), Member: region + "/1", Group: region,
					Limit: limit.Rate, Demand: demand, TTL: lease, Groups: 2, Floor: 20, Hold: hold, Seq: seq}})
				if err != nil || rep[0].Refused != nil {
					t.Fatal(err, rep)
				}
				return rep[0]
			}
			// A new Home grants floors and what is held, for a lease.
			if g := ask("a", 1000, 20, lease); g.Granted != 20 || g.Settling <= 0 {
				t.Fatalf("a new home granted %+v, want the floor while it settles", g)
			}
			h.advance(lease / 2)
			ask("b", 0, 20, lease) // keeps the key past a's first lease
			h.advance(lease/2 + 50*time.Millisecond)
			steps := []struct {
				region             string
				demand, hold, then int64
			}{
				{"a", 1000, 20, 580}, // all but b's floor
				{"b", 1000, 20, 20},  // a holds the rest
				{"a", 300, 580, 580}, // a asks less: granted 300, it still holds 580
				{"b", 1000, 20, 20},
				{"a", 300, 300, 300}, // a took 300: it gives back
				{"b", 1000, 20, 300},
			}
			for i, s := range steps {
				if g := ask(s.region, s.demand, s.hold, lease); max(g.Granted, s.hold) != s.then {
					t.Fatalf("step %d: %s granted %+v, want it to hold %d", i, s.region, g, s.then)
				}
			}
			h.advance(lease / 2)
			ask("b", 1000, 300, lease)
			h.advance(lease/2 + 50*time.Millisecond) // a's lease ends, b's lasts
			if g := ask("b", 1000, 300, lease); g.Granted != 580 {
				t.Fatalf("after a's lease ended, b granted %+v, want 580", g)
			}
		})
	}
}
