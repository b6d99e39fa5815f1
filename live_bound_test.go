package tollgate_test

// Overrides with a bound that holds for every call: a change through one
// replica applies on another within a round trip of its announcement, and
// never later than the refresh delay, even when the announcement is lost.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store"
)

// sentinelStore returns a Redis store on a private primary watched by a
// private Sentinel, through redis.NewFailoverClient.
func sentinelStore(t *testing.T) tollgate.Store {
	primary := redistest.Start(t)
	sentinel := redistest.Sentinel(t, primary)
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            redistest.SentinelMaster,
		SentinelAddrs:         []string{sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return newRedis(t, c)
}

// onEveryDeployment runs test on every store and on Sentinel.
func onEveryDeployment(t *testing.T, test func(t *testing.T, st tollgate.Store)) {
	onEveryStore(t, test)
	t.Run("sentinel", func(t *testing.T) { test(t, sentinelStore(t)) })
}

// Two Limiters on one store, each with the default refresh delay: B is
// warm, then idle 2.5s (on its clock, which the test moves); A changes the
// caller's override; B's first call 300ms later is decided on the change.
// A block, its lifting and an override of 3 an hour (exactly 3 of 6
// admitted).
func TestOverrideAppliesToAnIdleReplica(t *testing.T) {
	onEveryDeployment(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 100, Period: tollgate.MaxPeriod})
		a := limiter(t, st, interceptor.WithRules(r))
		clock := fakeclock.New(time.Now()) // B's: how old its view of the overrides is
		b := limiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.Clock = clock.Now })
		c := serve(t, b, &echo.Server{}, nil)
		ctx := context.Background()
		who := interceptor.Caller{Value: "x"}
		warmThenIdle := func() {
			t.Helper()
			if _, _, err := say(tenant("warm"), c); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2500 * time.Millisecond)
		}
		// The change is announced meanwhile: B's first call comes this
		// long after it.
		const later = 300 * time.Millisecond

		warmThenIdle()
		if err := a.Block(ctx, r.Name, who, 0); err != nil {
			t.Fatal(err)
		}
		redistest.Elapse(later)
		_, _, err := say(tenant("x"), c)
		wantCode(t, err, codes.PermissionDenied, "blocked")

		warmThenIdle()
		if err := a.DeleteOverride(ctx, r.Name, who); err != nil {
			t.Fatal(err)
		}
		redistest.Elapse(later)
		if _, _, err := say(tenant("x"), c); err != nil {
			t.Fatalf("first call after the block was lifted: %v, want admitted", err)
		}

		warmThenIdle()
		if err := a.SetOverride(ctx, r.Name, who, []tollgate.Limit{tollgate.PerHour(3)}, 0); err != nil {
			t.Fatal(err)
		}
		redistest.Elapse(later)
		admitted := 0
		for range 6 {
			_, _, err := say(tenant("x"), c)
			switch status.Code(err) {
			case codes.OK:
				admitted++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("call under the override: %v", err)
			}
		}
		if admitted != 3 {
			t.Fatalf("admitted %d of 6 calls under an override of 3 an hour, want exactly 3", admitted)
		}
	})
}

// B's refresh delay is an hour and B has just checked: only the store's
// watch can tell it. A block set through A refuses B's calls within 100ms;
// its deletion admits them again within 100ms.
func TestOverrideWatchAppliesWithin100ms(t *testing.T) {
	onEveryDeployment(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.PerHour(100))
		a := limiter(t, st, interceptor.WithRules(r))
		b := limiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = time.Hour })
		c := serve(t, b, &echo.Server{}, nil)
		ctx := context.Background()
		blocked := func(name string) error {
			_, _, err := say(tenant(name), c)
			return hasCode(err, codes.PermissionDenied, "blocked")
		}
		admitted := func(name string) error {
			if _, _, err := say(tenant(name), c); err != nil {
				return fmt.Errorf("%s's call: %v, want admitted", name, err)
			}
			return nil
		}
		// B's watch is subscribed once a change through A reaches it: a
		// block of another caller, lifted again.
		probe := interceptor.Caller{Value: "probe"}
		if err := a.Block(ctx, r.Name, probe, time.Minute); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 5*time.Second, func() error { return blocked("probe") })
		if err := a.DeleteOverride(ctx, r.Name, probe); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 5*time.Second, func() error { return admitted("probe") })

		who := interceptor.Caller{Value: "y"}
		if err := admitted("y"); err != nil {
			t.Fatal(err)
		}
		if err := a.Block(ctx, r.Name, who, time.Minute); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 100*time.Millisecond, func() error { return blocked("y") })
		if err := a.DeleteOverride(ctx, r.Name, who); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 100*time.Millisecond, func() error { return admitted("y") })
	})
}

// unwatched hides a store's watch, as a lost announcement would: only the
// refresh delay brings a change.
type unwatched struct{ tollgate.OverrideStore }

// With no announcement at all, a call after the refresh delay waits for a
// check and is decided on the change: B, warm, is told nothing of A's
// block, and its call past the delay (on its clock, which the test moves)
// is refused.
func TestOverrideWithoutAnnouncementWithinRefresh(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		const refresh = 200 * time.Millisecond
		r := rule(t, tollgate.PerHour(100))
		hidden := unwatched{st.(tollgate.OverrideStore)}
		a := limiter(t, hidden, interceptor.WithRules(r))
		clock := fakeclock.New(time.Now())
		b := limiter(t, hidden, interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = refresh }, func(c *engine.Config) { c.Clock = clock.Now })
		c := serve(t, b, &echo.Server{}, nil)
		for range 3 {
			if _, _, err := say(tenant("z"), c); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Block(context.Background(), r.Name, interceptor.Caller{Value: "z"}, 0); err != nil {
			t.Fatal(err)
		}
		clock.Advance(refresh + 20*time.Millisecond)
		_, _, err := say(tenant("z"), c)
		wantCode(t, err, codes.PermissionDenied, "blocked")
	})
}

// failingVersion is a store whose override version cannot be read once
// broken is set: its decisions still succeed.
type failingVersion struct {
	*store.Memory
	broken atomic.Bool
}

func (f *failingVersion) OverridesVersion(ctx context.Context) (int64, error) {
	if f.broken.Load() {
		return 0, errors.New("the version cannot be read")
	}
	return f.Memory.OverridesVersion(ctx)
}

// A call whose overrides are older than the refresh delay (on the
// Limiter's clock, which the test moves) and cannot be checked is decided
// by its rule's fail policy, not on the old overrides. (The store's watch
// is hidden: a store that decides in process and announces every change
// keeps the view fresh at any age.)
func TestOverrideUncheckableDecidedByFailPolicy(t *testing.T) {
	const refresh = 50 * time.Millisecond
	for _, tc := range []struct {
		mode interceptor.FailMode
		code codes.Code
	}{{interceptor.FailOpen, codes.OK}, {interceptor.FailClosed, codes.Unavailable}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			st := &failingVersion{Memory: newMemory(t)}
			r := rule(t, tollgate.PerHour(1))
			r.FailMode = tc.mode
			clock := fakeclock.New(time.Now())
			l := limiter(t, unwatched{st}, interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = refresh }, interceptor.WithStoreTimeout(50*time.Millisecond),
				func(c *engine.Config) { c.Clock = clock.Now })
			c := serve(t, l, &echo.Server{}, nil)
			if _, _, err := say(tenant("w"), c); err != nil {
				t.Fatal(err)
			}
			st.broken.Store(true)
			clock.Advance(refresh + 10*time.Millisecond)
			// The rule's own limit (1 an hour) would refuse this call.
			_, _, err := say(tenant("w"), c)
			if status.Code(err) != tc.code {
				t.Fatalf("call with uncheckable overrides: %v, want %s", err, tc.code)
			}
			st.broken.Store(false)
			_, _, err = say(tenant("w"), c)
			wantCode(t, err, codes.ResourceExhausted, "exceeded")
		})
	}
}

// Peek reports the limits in force: an override's, with its own state, and
// a block as Blocked.
func TestPeekShowsOverridesAndBlocks(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.PerHour(50))
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, &echo.Server{}, nil)
		ctx := context.Background()
		who := interceptor.Caller{Value: "p"}
		if err := l.SetOverride(ctx, r.Name, who, []tollgate.Limit{tollgate.PerHour(1000)}, 0); err != nil {
			t.Fatal(err)
		}
		for range 30 {
			if _, _, err := say(tenant("p"), c); err != nil {
				t.Fatal(err)
			}
		}
		qs, err := l.Peek(ctx, r.Name, who)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Limit != tollgate.PerHour(1000) || !qs[0].Override || qs[0].Available != 970 || !qs[0].Decision.Allowed {
			t.Fatalf("Peek of a caller overridden to 1000/h after 30 calls = %+v, want that limit with 970 available", qs)
		}
		if err := l.Block(ctx, r.Name, who, time.Hour); err != nil {
			t.Fatal(err)
		}
		qs, err = l.Peek(ctx, r.Name, who)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || !qs[0].Blocked || qs[0].Decision.Allowed || qs[0].Expires.IsZero() {
			t.Fatalf("Peek of a blocked caller = %+v, want one Quota, Blocked, not allowed, expiring", qs)
		}
		list, err := l.Overrides(ctx, r.Name)
		if err != nil || len(list) != 1 || !list[0].Blocked {
			t.Fatalf("Overrides = %+v, %v; want the caller blocked", list, err)
		}
		if err := l.SetOverride(ctx, r.Name, who, nil, 0); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("SetOverride with no limits = %v, want InvalidArgument", err)
		}
	})
}
