package tollgate_test

// Limits that change while the servers run: rules swapped by SetRules.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"slices"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
)

// A rule of 10 per window is raised to 30 by SetRules while 64 callers go
// on calling: no call fails for the swap, and exactly 30 are admitted in
// all, the 10 before the swap counting against the new limit (the rule
// keeps its name, algorithm and period, so the window carries over). The
// window is 366 days long: no boundary falls inside a test run.
func TestSetRulesUnderLoad(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		window := func(n int64) tollgate.Limit {
			return tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: n, Period: tollgate.MaxPeriod}
		}
		r := rule(t, window(10))
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, &echo.Server{}, nil)

		var once sync.Once
		swapped := make(chan struct{})
		stop := untilAndAfter(30, 300*time.Millisecond)
		admitted := hammer(t, c, "a", 64, time.Millisecond, func(admitted int64) bool {
			if admitted >= 10 {
				once.Do(func() {
					raised := r
					raised.Limits = interceptor.Fixed(window(30))
					if err := l.SetRules(raised); err != nil {
						t.Errorf("SetRules: %v", err)
					}
					close(swapped)
				})
			}
			return stop(admitted)
		})
		<-swapped
		if admitted != 30 {
			t.Fatalf("admitted %d calls, want exactly 30: 10 under the first rule, 20 more under the raised one", admitted)
		}
		if got := peekOne(t, l, r.Name, interceptor.Caller{Value: "a"}, tollgate.MaxPeriod).Available; got != 0 {
			t.Errorf("tenant a's available = %d, want 0", got)
		}
	})
}

// SetRules validates as New does: a bad rule set is refused, naming the
// rule, and the rules in force do not change.
func TestSetRulesRefusesBadRules(t *testing.T) {
	r := rule(t, tollgate.PerHour(1))
	l := limiter(t, newMemory(t), interceptor.WithRules(r))
	c := serve(t, l, &echo.Server{}, nil)
	bad := r
	bad.Limits = interceptor.Fixed(tollgate.Limit{Rate: -1, Period: time.Second})
	if err := l.SetRules(bad); err == nil || !strings.Contains(err.Error(), `rule "`+r.Name+`": Limits[0]:`) {
		t.Fatalf("SetRules(bad limit) = %v, want an error naming the rule and its limit", err)
	}
	if err := l.SetRules(); err == nil {
		t.Fatal("SetRules() with no rules = nil, want an error")
	}
	if got := l.Rules(); len(got) != 1 || !slices.Equal(got[0].Limits.List(), r.Limits.List()) {
		t.Fatalf("rules after refused swaps = %v, want the first rule unchanged", got)
	}
	if _, _, err := say(tenant("a"), c); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, _, err := say(tenant("a"), c)
	wantCode(t, err, codes.ResourceExhausted, "exceeded") // the old rule still holds
}

// An override set through one Limiter applies on another sharing the store
// within the refresh delay, ends with its TTL; an override of no limits
// blocks its caller; Overrides lists them; bad ones are refused and change
// nothing.
func TestOverridesAcrossReplicas(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		window := func(n int64) tollgate.Limit {
			return tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: n, Period: tollgate.MaxPeriod}
		}
		const refresh = 200 * time.Millisecond
		r := rule(t, window(2))
		admin := limiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = refresh })
		other := limiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = refresh })
		c := serve(t, other, &echo.Server{}, nil)
		ctx := context.Background()
		for range 2 {
			if _, _, err := say(tenant("a"), c); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, "exceeded")

		// Raised to 5 for 2s: the window carries over, 3 more are admitted.
		const ttl = 2 * time.Second
		if err := admin.SetOverride(ctx, r.Name, interceptor.Caller{Value: "a"}, []tollgate.Limit{window(5)}, ttl); err != nil {
			t.Fatal(err)
		}
		set := time.Now()
		admitted := 0
		redistest.Eventually(t, refresh+time.Second, func() error {
			for admitted < 3 {
				if _, _, err := say(tenant("a"), c); err != nil {
					return fmt.Errorf("the override is not seen by the other replica: %d of 3 more admitted, %v", admitted, err)
				}
				admitted++
			}
			return nil
		})
		_, _, err = say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, "exceeded")

		// A block, and the list.
		if err := admin.Block(ctx, r.Name, interceptor.Caller{Value: "b"}, 0); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, refresh+time.Second, func() error {
			_, _, err := say(tenant("b"), c)
			return hasCode(err, codes.PermissionDenied, "blocked")
		})
		list, err := other.Overrides(ctx, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, o := range list {
			got[o.Caller.Value] = len(o.Limits)
			if o.Blocked != (len(o.Limits) == 0) {
				t.Errorf("override %+v: Blocked is not set exactly when there are no limits", o)
			}
		}
		if len(list) != 2 || got["a"] != 1 || got["b"] != 0 {
			t.Fatalf("Overrides = %+v, want a raised and b blocked", list)
		}

		// Expiry: back to 2 for a, whose window already holds 5.
		redistest.Eventually(t, time.Until(set.Add(ttl))+refresh+time.Second, func() error {
			if list, err := other.Overrides(ctx, r.Name); err != nil || len(list) != 1 {
				return fmt.Errorf("Overrides = %+v, %v; want b's block alone once a's override expired", list, err)
			}
			return nil
		})
		_, _, err = say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, "exceeded")

		// Deleted: b is limited by the rule again (its calls before the
		// block was seen may have used its quota).
		if err := admin.DeleteOverride(ctx, r.Name, interceptor.Caller{Value: "b"}); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, refresh+time.Second, func() error {
			if _, _, err := say(tenant("b"), c); status.Code(err) == codes.PermissionDenied {
				return fmt.Errorf("b is still blocked: %v", err)
			}
			return nil
		})

		// Bad input: refused, nothing stored.
		for _, bad := range []struct {
			name   string
			rule   string
			who    interceptor.Caller
			limits []tollgate.Limit
			ttl    time.Duration
			code   codes.Code
		}{
			{"unknown rule", "nope", interceptor.Caller{Value: "c"}, nil, 0, codes.NotFound},
			{"bad limit", r.Name, interceptor.Caller{Value: "c"}, []tollgate.Limit{{Rate: -1, Period: time.Second}}, 0, codes.InvalidArgument},
			{"negative ttl", r.Name, interceptor.Caller{Value: "c"}, []tollgate.Limit{window(1)}, -time.Second, codes.InvalidArgument},
			{"no caller", r.Name, interceptor.Caller{}, []tollgate.Limit{window(1)}, 0, codes.InvalidArgument},
			{"anonymous without ShareMissing", r.Name, interceptor.Caller{Anonymous: true}, []tollgate.Limit{window(1)}, 0, codes.InvalidArgument},
			{"no limits", r.Name, interceptor.Caller{Value: "c"}, nil, 0, codes.InvalidArgument},
		} {
			err := admin.SetOverride(ctx, bad.rule, bad.who, bad.limits, bad.ttl)
			if status.Code(err) != bad.code {
				t.Errorf("%s: SetOverride = %v, want %s", bad.name, err, bad.code)
			}
		}
		if list, err := admin.Overrides(ctx, r.Name); err != nil || len(list) != 0 {
			t.Errorf("Overrides after the refused ones = %+v, %v; want none", list, err)
		}
	})
}
