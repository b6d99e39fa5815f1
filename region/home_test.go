package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
)

func redisHome(t *testing.T, c redis.UniversalClient) *RedisHome {
	t.Helper()
	h, err := NewRedisHome(c, redistest.KeyPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// strip drops what depends on when each home ran: the time left.
func strip(r Reply) Reply {
	r.At = time.Time{}
	for i := range r.Others {
		r.Others[i].Left = 0
	}
	return r
}

// TestHomeScriptMatchesMemory sends one random sequence of reports (three
// regions, two identities, rates and windows moving forward, wants above
// and below what is free, disagreeing configurations) to the script on a
// single node and on a Cluster, and to MemoryHome: every answer is the
// same.
func TestHomeScriptMatchesMemory(t *testing.T) {
	homes := map[string]Home{
		"single":  redisHome(t, redistest.Single(t).Client(t)),
		"cluster": redisHome(t, redistest.SharedCluster(t).Client(t)),
	}
	rate, month := normalize(tollgate.PerSecond(1000)), tollgate.Monthly(1_000_000)
	for name, home := range homes {
		t.Run(name, func(t *testing.T) {
			mem := NewMemoryHome(nil)
			rng := rand.New(rand.NewPCG(3, 4))
			windows := map[string]int64{}
			for step := range 600 {
				r := Report{Key: fmt.Sprint("tenant-", rng.IntN(2)), Region: fmt.Sprint("r", rng.IntN(3)), Regions: 3, Floor: 10,
					Demand: rng.Int64N(2000), Want: 10 + rng.Int64N(700), Keep: time.Minute}
				if rng.IntN(2) == 0 {
					r.Limit = rate
				} else {
					r.Limit = month
					w := windows[r.Key+r.Region]
					if rng.IntN(10) == 0 {
						w++
					}
					windows[r.Key+r.Region] = w
					r.Window, r.Used = w, rng.Int64N(100)
				}
				if rng.IntN(50) == 0 {
					r.Floor = 11 // disagrees
				}
				if rng.IntN(50) == 0 {
					r.Window = max(0, r.Window-1) // may be stale
				}
				want, err := mem.Report(context.Background(), []Report{r})
				if err != nil {
					t.Fatal(err)
				}
				got, err := home.Report(context.Background(), []Report{r})
				if err != nil {
					t.Fatal(err)
				}
				if g, w := strip(got[0]), strip(want[0]); !reflect.DeepEqual(g, w) {
					t.Fatalf("step %d, %+v:\nredis  %+v\nmemory %+v", step, r, g, w)
				}
			}
		})
	}
}

// TestHomeNeverGrantsWhatAnotherHolds has one region take the whole pool:
// the other is granted only its floor until the first's lease ends (on the
// Home's clock), or until the first asks less itself.
func TestHomeNeverGrantsWhatAnotherHolds(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	homes := map[string]struct {
		home    Home
		advance func(time.Duration)
	}{
		"memory": {NewMemoryHome(clock.Now), clock.Advance},
		"redis":  {redisHome(t, redistest.Single(t).Client(t)), redistest.Elapse}, // Redis's clock
	}
	limit := normalize(tollgate.PerSecond(600))
	for name, h := range homes {
		t.Run(name, func(t *testing.T) {
			ask := func(region string, want int64, keep time.Duration) int64 {
				t.Helper()
				rep, err := h.home.Report(context.Background(), []Report{{Key: "k", Limit: limit, Region: region, Regions: 2, Floor: 20, Want: want, Keep: keep}})
				if err != nil || rep[0].Err != nil {
					t.Fatal(err, rep)
				}
				return rep[0].Granted
			}
			steps := []struct {
				region     string
				want, then int64
			}{
				{"a", 580, 580}, // all but b's floor
				{"b", 580, 20},  // a holds the rest
				{"a", 300, 300}, // a asks less: it gives back at once
				{"b", 580, 300},
			}
			for i, s := range steps {
				if got := ask(s.region, s.want, 300*time.Millisecond); got != s.then {
					t.Fatalf("step %d: %s granted %d, want %d", i, s.region, got, s.then)
				}
			}
			h.advance(350 * time.Millisecond) // a's lease ends; b's too
			if got := ask("b", 580, time.Minute); got != 580 {
				t.Fatalf("after a's lease ended, b granted %d, want 580", got)
			}
		})
	}
}
