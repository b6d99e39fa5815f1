package engine_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/store"
)

// A rule's own adaptive limit (Rule.Overload): its configuration checked
// at New, its limit kept across SetRules while its options stay, and the
// calls of other methods untouched by it.

const slowMethod = "/shop.Stock/Reserve" // a method waiting on a slow dependency

// oneSeat is a rule limit of one seat that sheds a call finding it taken
// within a millisecond.
func oneSeat() *overload.Options {
	return &overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, ProbeInterval: -1, MaxWait: time.Millisecond, Target: time.Millisecond}
}

func newOverloadEngine(t *testing.T, c engine.Config) *engine.Limiter {
	t.Helper()
	st, err := store.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	l, err := engine.New(st, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func begin(l *engine.Limiter, ctx context.Context, method string) engine.Verdict {
	return l.Begin(ctx, engine.Call{Method: method, Header: keyfunc.HTTPHeader(nil)})
}

func TestRuleOverloadConfig(t *testing.T) {
	st, err := store.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	limited := engine.Fixed(tollgate.PerSecond(10))
	bad := []struct {
		name string
		rule engine.Rule
		want string
	}{
		{"shadow", engine.Rule{Name: "r", Key: keyfunc.Method(), Limits: limited, Shadow: true, Overload: oneSeat()}, "Shadow and Overload"},
		{"bad option", engine.Rule{Name: "r", Overload: &overload.Options{MaxWait: -time.Second}}, `rule "r": Overload`},
		{"cost", engine.Rule{Name: "r", Cost: 2, Overload: oneSeat()}, "Cost and CostFunc"},
		{"settle", engine.Rule{Name: "r", Settle: func(context.Context, any, error) (int64, bool) { return 1, true }, Overload: oneSeat()}, "Settle needs a rate limit"},
		{"share missing", engine.Rule{Name: "r", ShareMissing: true, Overload: oneSeat()}, "ShareMissing"},
		{"fail mode", engine.Rule{Name: "r", FailMode: engine.FailClosed, Overload: oneSeat()}, "FailMode"},
		{"bad method", engine.Rule{Name: "r", Methods: []string{"/v1/orders"}, Overload: oneSeat()}, "/v1/orders"},
		{"no key with limits", engine.Rule{Name: "r", Limits: limited, Overload: oneSeat()}, "Key is nil"},
	}
	for _, c := range bad {
		_, err := engine.New(st, engine.Config{Rules: []engine.Rule{c.rule}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A rule with only Overload needs no Key.
	l, err := engine.New(st, engine.Config{Rules: []engine.Rule{{Name: "slow", Methods: []string{slowMethod}, Overload: oneSeat()}}})
	if err != nil {
		t.Fatalf("a rule with only Overload: %v", err)
	}
	defer l.Close(context.Background())
	// It keeps no quota per caller: reading, overriding or resetting one
	// says so rather than answering nothing.
	who := engine.Caller{Value: "acme"}
	ctx := context.Background()
	_, errPeek := l.Peek(ctx, "slow", who)
	errSet := l.SetOverride(ctx, "slow", who, []tollgate.Limit{tollgate.PerSecond(1)}, time.Minute)
	errReset := l.Reset(ctx, "slow", who)
	_, errTop := l.TopRefused(ctx, "slow", 10, true)
	for i, err := range []error{errPeek, errSet, errReset, errTop} {
		if err == nil || !strings.Contains(err.Error(), "only Overload") {
			t.Errorf("operation %d on a rule with only Overload: %v, want an error saying it has only Overload", i, err)
		}
	}
	// Rules returns a copy: changing it changes nothing in force.
	rs := l.Rules()
	rs[0].Overload.MaxLimit = 99
	if l.Rules()[0].Overload.MaxLimit != 1 {
		t.Fatal("Rules shares its Overload with the rules in force")
	}
}

// A rule's seats bound its methods' calls, and only theirs; a call refused
// by it names the rule; SetRules keeps the limit, with the seats taken,
// while the rule's options stay, and starts a new one when they change.
func TestRuleOverloadBoundsItsMethods(t *testing.T) {
	slow := engine.Rule{Name: "slow", Methods: []string{slowMethod}, Overload: oneSeat()}
	l := newOverloadEngine(t, engine.Config{Rules: []engine.Rule{slow}})
	ctx := t.Context()
	held := begin(l, ctx, slowMethod)
	if err := held.Err(); err != nil {
		t.Fatal(err)
	}
	v := begin(l, ctx, slowMethod)
	if v.Kind() != engine.Shed || !strings.Contains(v.Err().Error(), `rule "slow"`) {
		t.Fatalf("a second call with the rule's one seat taken: %v (kind %v), want Shed naming the rule", v.Err(), v.Kind())
	}
	var r *overload.Refusal
	if !errors.Is(v.Err(), overload.ErrShed) || !errors.As(v.Err(), &r) {
		t.Fatalf("%v does not wrap an overload.Refusal", v.Err())
	}
	for range 3 { // other methods: not the rule's to bound
		o := begin(l, ctx, "/shop.Stock/List")
		if err := o.Err(); err != nil {
			t.Fatalf("a call the rule does not match: %v", err)
		}
		o.End(nil, nil)
	}

	// The same options: the same limit, its seat still taken.
	if err := l.SetRules(slow); err != nil {
		t.Fatal(err)
	}
	if v := begin(l, ctx, slowMethod); v.Kind() != engine.Shed {
		t.Fatalf("after SetRules with the same options: %v, want the held seat to still count", v.Err())
	}
	// New options: a new limit.
	two := slow
	two.Overload = oneSeat()
	two.Overload.MaxLimit, two.Overload.InitialLimit = 2, 2
	if err := l.SetRules(two); err != nil {
		t.Fatal(err)
	}
	v = begin(l, ctx, slowMethod)
	if err := v.Err(); err != nil {
		t.Fatalf("after SetRules with a limit of its own: %v", err)
	}
	v.End(nil, nil)
	held.End(nil, nil) // the old limit's seat goes back to the old limit
}

// A rule's limit stands in for the server's (Config.Overload): a call of
// its methods, running or waiting for the rule's seat, holds none of the
// server's, whose seats stay with the other methods.
func TestRuleOverloadStandsInForTheServers(t *testing.T) {
	wait := oneSeat()
	wait.MaxWait, wait.Target = time.Minute, time.Minute
	server := &overload.Options{MinLimit: 2, MaxLimit: 2, InitialLimit: 2, ProbeInterval: -1, MaxWait: time.Millisecond, Target: time.Millisecond}
	reader := sdkmetric.NewManualReader()
	l := newOverloadEngine(t, engine.Config{Overload: server, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Rules: []engine.Rule{{Name: "slow", Methods: []string{slowMethod}, Overload: wait}}})
	ctx := t.Context()
	held := begin(l, ctx, slowMethod) // the rule's one seat
	if err := held.Err(); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	const waiters = 3
	done := make(chan engine.Verdict, waiters)
	for range waiters {
		go func() { done <- begin(l, waitCtx, slowMethod) }()
	}
	// The waiters are in the rule's room (its gauge says so), none in the
	// server's; both of the server's seats are free for other methods, and
	// then none is.
	for queued(t, reader, "slow") != waiters {
		runtime.Gosched()
	}
	if n := queued(t, reader, ""); n != 0 {
		t.Fatalf("%d calls wait for the server's seats, want none", n)
	}
	var others []engine.Verdict
	for range 2 {
		o := begin(l, ctx, "/shop.Stock/List")
		if err := o.Err(); err != nil {
			t.Fatalf("a call of another method while the rule's calls run and wait: %v", err)
		}
		others = append(others, o)
	}
	if v := begin(l, ctx, "/shop.Stock/List"); v.Kind() != engine.Shed || strings.Contains(v.Err().Error(), "rule") {
		t.Fatalf("a third call with the server's two seats taken: %v, want the server's Shed", v.Err())
	}
	// The held call ends: a waiter takes the rule's seat, with the server's
	// two still taken.
	held.End(nil, nil)
	first := <-done
	if err := first.Err(); err != nil {
		t.Fatalf("the first waiter: %v", err)
	}
	stopWaiting()
	for range waiters - 1 {
		if v := <-done; v.Kind() != engine.Canceled {
			t.Fatalf("a waiter whose caller went away: %v, want Canceled", v.Err())
		}
	}
	first.End(nil, nil)
	for _, o := range others {
		o.End(nil, nil)
	}
	// Every seat is back: the rule's one and the server's two.
	for _, m := range []string{slowMethod, "/shop.Stock/List", "/shop.Stock/List"} {
		v := begin(l, ctx, m)
		if err := v.Err(); err != nil {
			t.Fatalf("%s after every call ended: %v", m, err)
		}
		defer v.End(nil, nil)
	}
}

// queued is the tollgate.overload.queued gauge of rule ("": the server's).
func queued(t *testing.T, reader *sdkmetric.ManualReader, rule string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok || m.Name != telemetry.MetricOverloadQueued {
				continue
			}
			for _, p := range g.DataPoints {
				if r, _ := p.Attributes.Value(telemetry.AttrRule); r.AsString() == rule {
					return p.Value
				}
			}
		}
	}
	t.Fatalf("no %s point for rule %q", telemetry.MetricOverloadQueued, rule)
	return 0
}
