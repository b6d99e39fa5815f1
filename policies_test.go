package tollgate_test

// End-to-end tests of the policies real deployments configure: several
// limits on one identity, several rules on one call, shadow rules, peek and
// reset. Each runs on the Memory store, a single Redis node and a 3-primary
// Redis Cluster, over real gRPC.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// onEveryStore runs test on the Memory store, a single Redis node and a
// Redis Cluster in the default and the tagged key layouts.
func onEveryStore(t *testing.T, test func(t *testing.T, st tollgate.Store)) {
	for _, s := range []struct {
		name string
		new  func(*testing.T) tollgate.Store
	}{
		{"memory", func(t *testing.T) tollgate.Store { return newMemory(t) }},
		{"single", redisStore},
		{"cluster", func(t *testing.T) tollgate.Store { return clusterStore(t) }},
		{"cluster-tagged", func(t *testing.T) tollgate.Store { return clusterStore(t, store.WithClusterTags(6)) }},
	} {
		t.Run(s.name, func(t *testing.T) { test(t, s.new(t)) })
	}
}

// hammer has callers goroutines call Say as tenant until stop returns true
// or the test's patience runs out, pausing pause between calls, and returns
// how many calls were admitted. Any answer but OK and ResourceExhausted
// fails the test.
func hammer(t *testing.T, c *echo.Client, tenantName string, callers int, pause time.Duration, stop func(admitted int64) bool) int64 {
	t.Helper()
	var admitted atomic.Int64
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for !stop(admitted.Load()) && time.Now().Before(deadline) {
				_, _, err := say(tenant(tenantName), c)
				switch status.Code(err) {
				case codes.OK:
					admitted.Add(1)
				case codes.ResourceExhausted:
				default:
					t.Errorf("call: %v", err)
					return
				}
				time.Sleep(pause)
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// untilAndAfter returns a stop function for hammer: true once n calls were
// admitted and d has passed since, or once no call was admitted for 3s.
func untilAndAfter(n int64, d time.Duration) func(admitted int64) bool {
	var mu sync.Mutex
	var reached time.Time
	last, lastAt := int64(-1), time.Now()
	return func(admitted int64) bool {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if admitted != last {
			last, lastAt = admitted, now
		}
		if admitted < n {
			return now.Sub(lastAt) > 3*time.Second
		}
		if reached.IsZero() {
			reached = now
		}
		return now.Sub(reached) > d
	}
}

// peekOne returns what Peek reports for the only limit of rule whose Period
// is period.
func peekOne(t *testing.T, l *interceptor.Limiter, rule string, who interceptor.Caller, period time.Duration) engine.Quota {
	t.Helper()
	qs, err := l.Peek(context.Background(), rule, who)
	if err != nil {
		t.Fatalf("Peek(%q): %v", rule, err)
	}
	for _, q := range qs {
		if q.Limit.Period == period && !q.PerMessage {
			return q
		}
	}
	t.Fatalf("Peek(%q) = %v: no limit of period %s", rule, qs, period)
	return engine.Quota{}
}

// A per-tenant rule (50 an hour) and a global rule (30 an hour) on one
// method: 64 concurrent callers of one tenant get exactly 30 admissions,
// and the tenant's quota shows only those 30 debited (the denied calls
// debited neither rule).
//
// On a Cluster the two rules' keys are on different slots: the store
// decides the riskiest slot first and gives back the debits of a denied
// set; the counts are exact there too.
func TestTwoRulesAllOrNothing(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		id := redistest.KeyPrefix(t)
		perTenant := rule(t, tollgate.PerHour(50))
		global := interceptor.Rule{Name: "global " + id, Methods: []string{echo.SayMethod}, Key: keyfunc.Method(), Limits: interceptor.Fixed(tollgate.PerHour(30))}
		l := limiter(t, st, interceptor.WithRules(perTenant, global))
		c := serve(t, l, &echo.Server{}, nil)

		// Callers go on until 30 calls were admitted and for 300ms more,
		// in which any over-admission would show. (On a Cluster, a set
		// whose slots are decided apart may be denied while another set's
		// debit is being given back: a caller may need another try, so the
		// test does not stop at a number of calls.)
		admitted := hammer(t, c, "a", 64, 5*time.Millisecond, untilAndAfter(30, 300*time.Millisecond))
		if admitted != 30 {
			t.Fatalf("admitted %d calls, want exactly 30 (the global limit)", admitted)
		}
		if got := peekOne(t, l, perTenant.Name, interceptor.Caller{Value: "a"}, time.Hour).Available; got != 20 {
			t.Errorf("tenant a's remaining = %d, want 20: only the admitted calls are debited", got)
		}
		if got := peekOne(t, l, global.Name, interceptor.Caller{Value: echo.SayMethod}, time.Hour).Available; got != 0 {
			t.Errorf("global remaining = %d, want 0", got)
		}
		// The denial names the global rule, the one that denies.
		_, _, err := say(tenant("b"), c)
		st2 := wantCode(t, err, codes.ResourceExhausted, `rate limit "global `)
		_, quota := grpctest.DenialDetails(st2)
		if v := quota.GetViolations(); len(v) != 1 || v[0].GetQuotaId() != global.Name {
			t.Errorf("QuotaFailure = %v, want one violation of %q", quota, global.Name)
		}
		if got := peekOne(t, l, perTenant.Name, interceptor.Caller{Value: "b"}, time.Hour).Available; got != 50 {
			t.Errorf("tenant b's remaining = %d after a denied call, want 50", got)
		}
	})
}

// One burst across slots: the per-tenant rule (50 an hour) and the global
// rule (30 an hour) of TestTwoRulesAllOrNothing, 100 calls of one tenant
// sent at once, each once. Exactly 30 are admitted and the tenant is left
// exactly 20, in each of 10 runs: on a Cluster the store decides first the
// rule nearer its limit (the global one), so a tenant debit never stands
// for a call the global rule denies.
func TestBurstAcrossSlotsExact(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		for run := range 10 {
			id := redistest.KeyPrefix(t) + strconv.Itoa(run)
			perTenant := interceptor.Rule{Name: "per-tenant " + id, Methods: []string{echo.SayMethod}, Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerHour(50))}
			global := interceptor.Rule{Name: "global " + id, Methods: []string{echo.SayMethod}, Key: keyfunc.Method(), Limits: interceptor.Fixed(tollgate.PerHour(30))}
			l := limiter(t, st, interceptor.WithRules(perTenant, global))
			c := serve(t, l, &echo.Server{}, nil)
			var admitted atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					<-start
					_, _, err := say(tenant("a"), c)
					switch status.Code(err) {
					case codes.OK:
						admitted.Add(1)
					case codes.ResourceExhausted:
					default:
						t.Errorf("call: %v", err)
					}
				})
			}
			close(start)
			wg.Wait()
			tenantLeft := peekOne(t, l, perTenant.Name, interceptor.Caller{Value: "a"}, time.Hour).Available
			if admitted.Load() != 30 || tenantLeft != 20 {
				t.Fatalf("run %d: %d of 100 admitted, the tenant left %d; want exactly 30 and 20", run+1, admitted.Load(), tenantLeft)
			}
		}
	})
}

// Two limits on one tenant, 5 a second and 20 an hour: 64 concurrent
// callers get exactly 20 admissions over the seconds the first limit
// needs, and a call the hourly limit denies does not debit the per-second
// one.
func TestTwoLimitsOnOneIdentity(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := rule(t, tollgate.Limit{})
		// A short name, unique to the run, keeps the keys' tags verbatim
		// (not hashed), so the Cluster's keys can be found by name below.
		r.Name = "two-limits-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		r.Limits = interceptor.Fixed(tollgate.PerSecond(5), tollgate.PerHour(20))
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, &echo.Server{}, nil)

		// Stop 300ms after the 20th admission: any over-admission in that
		// time would show.
		admitted := hammer(t, c, "a", 64, 20*time.Millisecond, untilAndAfter(20, 300*time.Millisecond))
		if admitted != 20 {
			t.Fatalf("admitted %d calls, want exactly 20 (the hourly limit)", admitted)
		}
		if t.Name() == "TestTwoLimitsOnOneIdentity/cluster" {
			// Both states, while the per-second bucket is not yet full
			// again (a full bucket is no key: on a slow machine it may
			// be full already, and only the hourly state is left).
			sameSlot(t, r.Name, 2)
		}
		// Once the per-second bucket is full again, a call the hourly
		// limit denies leaves it full.
		who := interceptor.Caller{Value: "a"}
		redistest.Eventually(t, 1100*time.Millisecond, func() error {
			if got := peekOne(t, l, r.Name, who, time.Second).Available; got != 5 {
				return fmt.Errorf("per-second remaining = %d, want 5 after a quiet second", got)
			}
			return nil
		})
		trailer, _, err := say(tenant("a"), c)
		if got := one(t, trailer, fields.LegacyLimit); got != "20" {
			t.Errorf("x-ratelimit-limit = %s, want 20: the trailers describe the denying limit", got)
		}
		denied := wantCode(t, err, codes.ResourceExhausted, "exceeded")
		retry, quota := grpctest.DenialDetails(denied)
		if v := quota.GetViolations(); len(v) != 1 || v[0].GetQuotaValue() != 20 {
			t.Errorf("QuotaFailure = %v, want one violation, of the hourly limit", quota)
		}
		if d := retry.GetRetryDelay().AsDuration(); d < 2*time.Minute || d > 3*time.Minute {
			t.Errorf("RetryInfo = %s, want the hourly limit's wait (up to 3m for one unit)", d)
		}
		if got := peekOne(t, l, r.Name, who, time.Second).Available; got != 5 {
			t.Errorf("per-second remaining = %d after a denied call, want 5: a denial debits no limit", got)
		}
		if got := peekOne(t, l, r.Name, who, time.Hour).Available; got != 0 {
			t.Errorf("hourly remaining = %d, want 0", got)
		}
	})
}

// sameSlot fails the test unless the Cluster holds 1 to n keys whose names
// contain unique, all on one slot: one script call decides them.
func sameSlot(t *testing.T, unique string, n int) {
	t.Helper()
	c := redis.NewClusterClient(redistest.SharedCluster(t).Options())
	defer c.Close()
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		found, err := m.Keys(ctx, "*"+unique+"*").Result()
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	for _, k := range keys {
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(keys) == 0 || len(keys) > n || len(slots) != 1 {
		t.Fatalf("keys %q on %d slots, want 1 to %d keys on one slot", keys, len(slots), n)
	}
	if len(keys) < n {
		t.Logf("keys %q: %d of %d states left (the others full again, so no key)", keys, len(keys), n)
	}
}

// Shadow rules never deny; their denials are recorded, and they do not keep
// the enforcing rules from debiting. Reset gives a tenant its quota back;
// Peek never debits.
func TestShadowPeekAndReset(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		enforcing := rule(t, tollgate.PerHour(3))
		trial := interceptor.Rule{Name: "trial " + redistest.KeyPrefix(t), Methods: []string{echo.SayMethod},
			Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerHour(1)), Shadow: true}
		l := limiter(t, st, interceptor.WithRules(enforcing, trial))
		c := serve(t, l, &echo.Server{}, nil)
		who := interceptor.Caller{Value: "a"}

		for i := range 3 {
			if _, _, err := say(tenant("a"), c); err != nil {
				t.Fatalf("call %d: %v (the shadow rule must not deny)", i+1, err)
			}
		}
		if got := peekOne(t, l, enforcing.Name, who, time.Hour).Available; got != 0 {
			t.Fatalf("enforcing remaining = %d, want 0: a shadow denial must not undo its debit", got)
		}
		_, _, err := say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, enforcing.Name)
		for range 3 {
			if got := peekOne(t, l, trial.Name, who, time.Hour).Available; got != 0 {
				t.Fatalf("shadow remaining = %d, want 0", got)
			}
		}

		if err := l.Reset(context.Background(), enforcing.Name, interceptor.Caller{Metadata: map[string][]string{tenantHeader: {"a"}}}); err != nil {
			t.Fatal(err)
		}
		if got := peekOne(t, l, enforcing.Name, who, time.Hour).Available; got != 3 {
			t.Fatalf("remaining after Reset = %d, want 3", got)
		}
		for i := range 3 {
			if _, _, err := say(tenant("a"), c); err != nil {
				t.Fatalf("call %d after Reset: %v", i+1, err)
			}
		}
		_, _, err = say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, enforcing.Name)

		_, err = l.Peek(context.Background(), "no such rule", who)
		if st, _ := status.FromError(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), `"no such rule"`) || !errors.Is(err, engine.ErrUnknownRule) {
			t.Errorf("Peek of an unknown rule: %v, want NotFound naming it, wrapping ErrUnknownRule", err)
		}
	})
}
