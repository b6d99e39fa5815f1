package tollgate_test

// Limits that change while the servers run: rules swapped by SetRules.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/store"
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
					raised.Limit = window(30)
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
	l := limiter(t, store.NewMemory(), interceptor.WithRules(r))
	c := serve(t, l, &echo.Server{}, nil)
	bad := r
	bad.Limit = tollgate.Limit{Rate: -1, Period: time.Second}
	if err := l.SetRules(bad); err == nil || !strings.Contains(err.Error(), `rule "`+r.Name+`": Limit:`) {
		t.Fatalf("SetRules(bad limit) = %v, want an error naming the rule and its Limit", err)
	}
	if err := l.SetRules(); err == nil {
		t.Fatal("SetRules() with no rules = nil, want an error")
	}
	if got := l.Rules(); len(got) != 1 || got[0].Limit != r.Limit {
		t.Fatalf("rules after refused swaps = %v, want the first rule unchanged", got)
	}
	if _, _, err := say(tenant("a"), c); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, _, err := say(tenant("a"), c)
	wantCode(t, err, codes.ResourceExhausted, "exceeded") // the old rule still holds
}
