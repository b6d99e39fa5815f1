package connectlimit_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// A rule's own adaptive limit (Rule.Overload) through the three doors of
// one engine, beside a rate limit of the same rule decided in the store.

// sayRoutes are the routes overloadDoors serves: the RPC method and the
// HTTP route.
var sayRoutes = []string{echo.SayMethod, "GET /v1/say/{word}"}

// A call the rule's limit sheds is refused on every door as the server's
// step refuses one (Unavailable, 503), counted under the rule's name; the
// calls of other methods, and the server's seats, are not touched: the
// rule's limit stands in for the server's.
func TestRuleOverloadShedsOnEveryDoor(t *testing.T) {
	eachBackend(t, func(t *testing.T, st tollgate.Store) {
		reader := sdkmetric.NewManualReader()
		l := newEngine(t, st, engine.Config{
			Rules: []engine.Rule{{
				Name: "say", Methods: sayRoutes, Key: keyfunc.Constant("all"),
				Limits: engine.Fixed(tollgate.Limit{Rate: 1000, Period: time.Second}),
				Overload: &overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, ProbeInterval: -1,
					MaxWait: time.Millisecond, Target: time.Millisecond},
			}},
			Overload:      &overload.Options{MinLimit: 8, MaxLimit: 8, InitialLimit: 8, ProbeInterval: -1},
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		})
		held := l.Begin(t.Context(), engine.Call{Method: echo.SayMethod, Header: keyfunc.HTTPHeader(nil)})
		if err := held.Err(); err != nil {
			t.Fatal(err)
		}
		defer held.End(nil, nil)
		calls := 0
		for name, call := range overloadDoors(t, l, func(context.Context) { t.Error("a shed call reached its handler") }) {
			calls++
			if a := call(t.Context(), ""); a.code != codes.Unavailable || a.retryAfter == "" {
				t.Errorf("%s: %s, retry-after %q: want Unavailable (503) with a retry-after", name, a.code, a.retryAfter)
			}
		}
		byRule := shedBy(t, reader, telemetry.AttrRule)
		if byRule["say"] != int64(calls) || len(byRule) != 1 {
			t.Fatalf("%s by rule: %v, want %d under \"say\" and nothing else", telemetry.MetricOverloadShed, byRule, calls)
		}
		// Another method takes every one of the server's seats: the rule's
		// calls, the held one and the shed ones, hold none.
		for range 8 {
			v := l.Begin(t.Context(), engine.Call{Method: "/hold.Service/Hold", Header: keyfunc.HTTPHeader(nil)})
			if err := v.Err(); err != nil {
				t.Fatalf("a call the rule does not match: %v", err)
			}
			defer v.End(nil, nil)
		}
		// The rule's rate limit counted the held call only: the shed ones
		// never reached the store.
		qs, err := l.Peek(t.Context(), "say", engine.Caller{Value: "all"})
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Decision.Remaining != 999 {
			t.Fatalf("Peek: %+v, want 999 of 1000 left", qs)
		}
	})
}

// Five clients, one on each door, call a method whose rule allows two
// calls at once and lets a call wait for a seat: every call is admitted,
// never more than two handlers run at once, and both seats are used.
func TestRuleOverloadBoundsHandlersOnEveryDoor(t *testing.T) {
	st := storefixture.Memory(t)
	l := newEngine(t, st, engine.Config{Rules: []engine.Rule{{
		Name: "say", Methods: sayRoutes,
		Overload: &overload.Options{MinLimit: 2, MaxLimit: 2, InitialLimit: 2, ProbeInterval: -1, MaxWait: time.Minute, Target: time.Minute},
	}}})
	const perDoor = 20
	answers, doors, most := callEveryDoorAtOnce(t, l, "", perDoor)
	if answers[codes.OK] != doors*perDoor || len(answers) != 1 {
		t.Fatalf("answers %v, want all %d admitted", answers, doors*perDoor)
	}
	if most != 2 {
		t.Fatalf("at most %d handlers ran at once under the rule's limit of 2, want 2", most)
	}
}
