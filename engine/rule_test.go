package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// nopStore fails every decision; New never calls it. Methods other than
// Allow are not used.
type nopStore struct{ tollgate.Store }

func (nopStore) Allow(context.Context, tollgate.Request) (tollgate.Decision, error) {
	return tollgate.Decision{}, context.DeadlineExceeded
}

// replacing returns a rule on methods that replaces the rules named.
func replacing(name string, methods []string, replaces ...string) Rule {
	r := testRule(name, methods...)
	r.Replaces = replaces
	return r
}

func testRule(name string, methods ...string) Rule {
	return Rule{Name: name, Methods: methods, Key: keyfunc.Method(), Limits: Fixed(tollgate.PerSecond(10))}
}

// names returns the names of the rules in set, "" for none.
func names(set *ruleSet) string {
	if set == nil {
		return ""
	}
	var out []string
	for _, p := range set.calls.plans {
		out = append(out, p.rule.Name)
	}
	return strings.Join(out, ",")
}

func TestMatchEveryRuleApplies(t *testing.T) {
	l, err := New(nopStore{}, WithRules(
		testRule("say", "/a.Echo/Say"),
		testRule("echo", "/a.Echo/*", "/b.Other/Exact"),
		testRule("count", "/a.Echo/Count", "/c.Third/One"),
		testRule("other", "/b.Other/*"),
		testRule("rest"),
	))
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]string{
		"/a.Echo/Say":    "say,echo,rest",
		"/a.Echo/Count":  "echo,count,rest",
		"/a.Echo/Chat":   "echo,rest",
		"/b.Other/Exact": "echo,other,rest",
		"/b.Other/Else":  "other,rest",
		"/c.Third/One":   "count,rest",
		"/c.Third/Two":   "rest",
		"/d.X/Y":         "rest",
		"":               "rest",
		"garbage":        "rest",
	} {
		if got := names(l.book.Load().matcher.match(method)); got != want {
			t.Errorf("match(%q) = %q, want %q", method, got, want)
		}
	}
}

// A rule replaces others only on the methods it matches, and a replaced
// rule's own Replaces still apply.
func TestMatchReplaces(t *testing.T) {
	say := testRule("say", "/a.Echo/Say")
	say.Replaces = []string{"echo"}
	echo := testRule("echo", "/a.Echo/*")
	echo.Replaces = []string{"global"}
	l, err := New(nopStore{}, WithRules(say, echo, testRule("tenant", "/a.Echo/Say"), testRule("global")))
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]string{
		"/a.Echo/Say":   "say,tenant",
		"/a.Echo/Count": "echo",
		"/b.X/Y":        "global",
	} {
		if got := names(l.book.Load().matcher.match(method)); got != want {
			t.Errorf("match(%q) = %q, want %q", method, got, want)
		}
	}
}

func TestMatchNoCatchAllLeavesOthersUnlimited(t *testing.T) {
	l, err := New(nopStore{}, WithRules(testRule("say", "/a.Echo/Say"), testRule("svc", "/b.S/*")))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/a.Echo/Count", "/a.Echo/Sayx", "/b.Sx/M", "/b.S", "", "/grpc.health.v1.Health/Check"} {
		if set := l.book.Load().matcher.match(m); set != nil {
			t.Errorf("match(%q) = rules %q, want none", m, names(set))
		}
	}
	if got := names(l.book.Load().matcher.match("/b.S/Anything")); got != "svc" {
		t.Errorf("match(/b.S/Anything) = %q, want svc", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ok := testRule("r", "/a.B/C")
	with := func(f func(*Rule)) Rule { r := ok; f(&r); return r }
	big := tollgate.PerSecond(1)
	for _, tc := range []struct {
		name  string
		opts  []Option
		store tollgate.Store
		want  string // substring of the error
	}{
		{"no store", []Option{WithRules(ok)}, nil, "store is nil"},
		{"typed nil store", []Option{WithRules(ok)}, (*store.Memory)(nil), "store is nil"},
		{"typed nil local store", []Option{WithRules(ok), WithLocalStore((*store.Memory)(nil))}, nopStore{}, "the local store (WithLocalStore) is nil"},
		{"no rules", nil, nopStore{}, "no rules"},
		{"empty name", []Option{WithRules(with(func(r *Rule) { r.Name = "" }))}, nopStore{}, "rule 0: Name is empty"},
		{"control char", []Option{WithRules(with(func(r *Rule) { r.Name = "a\x00b" }))}, nopStore{}, "control character"},
		{"long name", []Option{WithRules(with(func(r *Rule) { r.Name = strings.Repeat("n", maxRuleNameLen+1) }))}, nopStore{}, "more than 128"},
		{"bad utf8", []Option{WithRules(with(func(r *Rule) { r.Name = "\xff" }))}, nopStore{}, "UTF-8"},
		{"duplicate", []Option{WithRules(ok, testRule("r", "/x.Y/Z"))}, nopStore{}, `rule "r": the name is used by an earlier rule`},
		{"nil key", []Option{WithRules(with(func(r *Rule) { r.Key = nil }))}, nopStore{}, `rule "r": Key is nil`},
		{"bad header", []Option{WithRules(with(func(r *Rule) { r.Key = keyfunc.Metadata("X Tenant") }))}, nopStore{}, `rule "r": Key: keyfunc.Metadata: "X Tenant" is not a valid gRPC metadata key`},
		{"empty constant", []Option{WithRules(with(func(r *Rule) { r.Key = keyfunc.Constant("") }))}, nopStore{}, `rule "r": Key: keyfunc.Constant: the value is 0 bytes`},
		{"nil context key", []Option{WithRules(with(func(r *Rule) { r.Key = keyfunc.Context(nil) }))}, nopStore{}, `rule "r": Key: keyfunc.Context: the key is nil`},
		{"empty join", []Option{WithRules(with(func(r *Rule) { r.Key = keyfunc.Join() }))}, nopStore{}, `rule "r": Key: keyfunc.Join: no Func given`},
		{"nil in first-of", []Option{WithRules(with(func(r *Rule) { r.Key = keyfunc.FirstOf(keyfunc.Peer(), nil) }))}, nopStore{}, `rule "r": Key: keyfunc.FirstOf: Func 1: keyfunc: the Func is nil`},
		{"bad limit", []Option{WithRules(with(func(r *Rule) { r.Limits = Fixed(tollgate.Limit{Rate: 0, Period: time.Second}) }))}, nopStore{}, `rule "r": Limits[0]:`},
		{"cost above capacity", []Option{WithRules(with(func(r *Rule) { r.Cost = 11 }))}, nopStore{}, `rule "r": Limits[0]: cost 11 exceeds the capacity 10`},
		{"settle in-flight only", []Option{WithRules(with(func(r *Rule) {
			r.Limits, r.InFlight = Limits{}, InFlight{Max: 2}
			r.Settle = SettleReported
		}))}, newMemory(t), `rule "r": Settle needs a rate limit to settle`},
		{"settle without a settler", []Option{WithRules(with(func(r *Rule) { r.Settle = SettleReported }))}, nopStore{}, `rule "r": Settle needs a store that settles (tollgate.Settler)`},
		{"settle locally without a settler", []Option{WithLocalStore(nopStore{}), WithRules(with(func(r *Rule) {
			r.Settle, r.FailMode = SettleReported, FailLocal
		}))}, newMemory(t), `rule "r": Settle with FailLocal needs a local store that settles (tollgate.Settler)`},
		{"fail local without a local store", []Option{WithRules(with(func(r *Rule) { r.FailMode = FailLocal }))}, nopStore{}, `rule "r": FailLocal needs a local store to decide in: give the Limiter one with WithLocalStore`},
		{"fail local in flight without local seats", []Option{WithLocalStore(nopStore{}), WithRules(with(func(r *Rule) {
			r.FailMode, r.InFlight = FailLocal, InFlight{Max: 2}
		}))}, newMemory(t), `rule "r": InFlight with FailLocal needs a local store that bounds calls in flight`},
		{"no limit", []Option{WithRules(with(func(r *Rule) { r.Limits = Limits{} }))}, nopStore{}, `rule "r": no limit: set Limits (Fixed or PerCaller), or InFlight`},
		{"nil PerCaller", []Option{WithRules(with(func(r *Rule) { r.Limits = PerCaller(nil) }))}, nopStore{}, `rule "r": Limits: PerCaller's function is nil`},
		{"negative cost", []Option{WithRules(with(func(r *Rule) { r.Cost = -1 }))}, nopStore{}, `rule "r": Cost must be >= 0`},
		{"no slash", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"a.B/C"} }))}, nopStore{}, `rule "r": method "a.B/C" is not of the form`},
		{"no method", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/"} }))}, nopStore{}, "is not of the form"},
		{"no service", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"//C"} }))}, nopStore{}, "is not of the form"},
		{"three parts", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a/B/C"} }))}, nopStore{}, "is not of the form"},
		{"partial star", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/Get*"} }))}, nopStore{}, `"*" may only stand alone`},
		{"star service", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/*/C"} }))}, nopStore{}, `"*" may only stand alone`},
		{"space", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/C D"} }))}, nopStore{}, "white space"},
		{"shape wait", []Option{WithRules(with(func(r *Rule) { r.PerMessage = Shape(tollgate.PerSecond(1), -time.Second) }))}, nopStore{}, `rule "r": PerMessage: Shape's maxWait must be >= 0`},
		{"missing policy", []Option{WithRules(with(func(r *Rule) { r.OnMissingKey = 9 }))}, nopStore{}, "unknown OnMissingKey"},
		{"per message", []Option{WithRules(with(func(r *Rule) { r.PerMessage = Police(tollgate.Limit{Rate: 1}) }))}, nopStore{}, `rule "r": PerMessage:`},
		{"local limit too small", []Option{WithLocalStore(nopStore{}), WithRules(with(func(r *Rule) { r.FailMode, r.Cost = FailLocalAt(big), 2 }))}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"local limit invalid", []Option{WithLocalStore(nopStore{}), WithRules(with(func(r *Rule) { r.FailMode = FailLocalAt(tollgate.Limit{}) }))}, nopStore{}, `rule "r": local limit for FailLocal: rate must be`},
		{"replicas leave no room for cost", []Option{WithLocalStore(nopStore{}), WithReplicas(10), WithRules(with(func(r *Rule) { r.FailMode, r.Cost = FailLocal, 5 }))}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"replaced everywhere by a catch-all", []Option{WithRules(replacing("all", nil, "r"), ok)}, nopStore{}, `rule "r" never applies`},
		{"replaced everywhere by a service", []Option{WithRules(replacing("svc", []string{"/a.B/*"}, "r"), ok)}, nopStore{}, `rule "r" never applies`},
		{"replaced everywhere by several", []Option{WithRules(replacing("x", []string{"/a.B/C"}, "two"), replacing("y", []string{"/z.Z/*"}, "two"), testRule("two", "/a.B/C", "/z.Z/Q"))}, nopStore{}, `rule "two" never applies`},
		{"replaces unknown", []Option{WithRules(replacing("x", nil, "nope"))}, nopStore{}, `rule "x" replaces "nope", which is not a rule`},
		{"replaces itself", []Option{WithRules(replacing("x", nil, "x"))}, nopStore{}, `rule "x" replaces itself`},
		{"replaces disjoint", []Option{WithRules(replacing("x", []string{"/a.B/D"}, "r"), ok)}, nopStore{}, `rule "x" replaces "r", but no method matches both`},
		{"replace cycle", []Option{WithRules(replacing("x", []string{"/a.B/*"}, "y"), replacing("y", []string{"/a.B/C", "/a.B/D"}, "x"))}, nopStore{}, `rules replace each other in a cycle: "x" replaces "y" replaces "x"`},
		{"empty limits", []Option{WithRules(with(func(r *Rule) { r.Limits = Fixed() }))}, nopStore{}, `rule "r": Limits has 0 limits`},
		{"bad limits", []Option{WithRules(with(func(r *Rule) {
			r.Limits = Fixed(tollgate.PerSecond(1), tollgate.Limit{Rate: 1})
		}))}, nopStore{}, `rule "r": Limits[1]:`},
		{"limits sharing state", []Option{WithRules(with(func(r *Rule) {
			r.Limits = Fixed(tollgate.PerSecond(10), tollgate.PerHour(9), tollgate.Limit{Rate: 20, Period: time.Second})
		}))}, nopStore{}, `rule "r": Limits: limits 0 (token_bucket 10/1s burst 10) and 2 (token_bucket 20/1s burst 20) have the same algorithm and period`},
		{"negative in-flight", []Option{WithRules(with(func(r *Rule) { r.InFlight.Max = -1 }))}, nopStore{}, `rule "r": InFlight.Max must be >= 0`},
		{"negative seat timeout", []Option{WithRules(with(func(r *Rule) { r.InFlight = InFlight{Max: 2, SeatTimeout: -time.Second} }))}, nopStore{}, `rule "r": InFlight.SeatTimeout must be >= 0`},
		{"negative stream wait", []Option{WithRules(with(func(r *Rule) { r.InFlight = InFlight{Max: 2, StreamWait: -time.Second} }))}, nopStore{}, `rule "r": InFlight.StreamWait must be >= 0`},
		{"seat timeout without max", []Option{WithRules(with(func(r *Rule) { r.InFlight = InFlight{SeatTimeout: time.Second} }))}, nopStore{}, `rule "r": InFlight has a SeatTimeout or a StreamWait but no Max`},
		{"no seat timeout", []Option{WithSeatTimeout(0), WithRules(with(func(r *Rule) { r.InFlight.Max = 2 }))}, nopStore{}, `rule "r": InFlight.SeatTimeout is 0 and so is the Limiter's`},
		{"in-flight without slots", []Option{WithRules(with(func(r *Rule) { r.InFlight.Max = 2 }))}, nopStore{}, `rule "r": InFlight needs a store that bounds calls in flight`},
		{"store timeout", []Option{WithRules(ok), WithStoreTimeout(0)}, nopStore{}, "store timeout"},
		{"breaker cool-down", []Option{WithRules(ok), WithBreaker(3, 0)}, nopStore{}, "cool-down"},
		{"breaker failures", []Option{WithRules(ok), WithBreaker(-1, time.Second)}, nopStore{}, "breaker failures"},
		{"replicas", []Option{WithRules(ok), WithReplicas(0)}, nopStore{}, "replicas"},
		{"header case", []Option{WithRules(ok), WithRequestIDHeader("X-Request-Id")}, nopStore{}, "metadata keys are lower-case"},
		{"header reserved", []Option{WithRules(ok), WithRequestIDHeader("grpc-id")}, nopStore{}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.store, tc.opts...)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error containing %q", l, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestNewAcceptsGoodConfig(t *testing.T) {
	per := tollgate.Limit{Rate: 5, Period: time.Second}
	local := tollgate.PerSecond(2)
	l, err := New(nopStore{}, WithReplicas(4), WithBreaker(0, 0), WithLocalStore(newMemory(t)), WithRules(
		Rule{Name: "per-tenant ✓", Methods: []string{"/a.B/C", "/a.B/D"}, Key: keyfunc.Metadata("x-tenant"), Limits: Fixed(tollgate.PerMinute(100)), Cost: 3, FailMode: FailLocal},
		Rule{Name: "stream", Methods: []string{"/a.S/*"}, Key: keyfunc.Method(), Limits: Fixed(tollgate.PerSecond(1)), PerMessage: Shape(per, 0), FailMode: FailLocal},
		Rule{Name: "dynamic", Key: keyfunc.Method(), Limits: PerCaller(func(context.Context, string) ([]tollgate.Limit, error) { return []tollgate.Limit{per}, nil }), FailMode: FailLocalAt(local)},
	))
	if err != nil {
		t.Fatal(err)
	}
	// WithReplicas(4) divides the static limit for FailLocal, rounding up.
	if got, want := l.book.Load().rules[0].call.limits[0].local, (tollgate.Limit{Rate: 25, Period: time.Minute, Burst: 25}); got != want {
		t.Errorf("local limit = %v, want %v", got, want)
	}
	if got := l.book.Load().rules[2].call.explicitLocal; got == nil || *got != local {
		t.Errorf("FailLocalAt's cap = %v, want %v", got, local)
	}
	if l.book.Load().rules[1].maxShapeWait != DefaultMaxShapeWait {
		t.Errorf("maxShapeWait = %s, want the default %s", l.book.Load().rules[1].maxShapeWait, DefaultMaxShapeWait)
	}
}

// Store keys of different rules, scopes and the anonymous identity never
// coincide, whatever the key function returns.
func TestKeyPrefixesAreUnambiguous(t *testing.T) {
	l, err := New(nopStore{}, WithRules(testRule("a", "/x.Y/A"), testRule("a:", "/x.Y/B"), testRule("ab", "/x.Y/C")))
	if err != nil {
		t.Fatal(err)
	}
	values := []string{"", "a", "\x00ck:", "\x00ca", "\x00mk:", "\x00ma", "b", "k:", "ck:x", "a\x00ck:"}
	seen := map[string]string{}
	for _, r := range l.book.Load().rules {
		for _, s := range []scope{scopeCall, scopeMessage} {
			p := newPlan(r, s, nil, limitChooser{}, 1)
			anon := p.key("", true)
			if prev, dup := seen[anon]; dup {
				t.Fatalf("key %q for rule %q anonymous also built as %s", anon, r.Name, prev)
			}
			seen[anon] = r.Name + " anonymous"
			for _, v := range values {
				k := p.key(v, false)
				if prev, dup := seen[k]; dup {
					t.Fatalf("key %q for rule %q value %q also built as %s", k, r.Name, v, prev)
				}
				seen[k] = r.Name + " value " + v
			}
		}
	}
}

// Calendar limits have no Period: their part names the calendar.
func TestLimitPart(t *testing.T) {
	for l, want := range map[tollgate.Limit]string{
		tollgate.PerSecond(1): "1s",
		tollgate.PerHour(1):   "1h0m0s",
		tollgate.Daily(1):     "daily",
		tollgate.Monthly(1):   "monthly",
	} {
		if got := limitPart(l); got != want {
			t.Errorf("limitPart(%v) = %q, want %q", l, got, want)
		}
	}
}

// TestMaxInFlightIsInFlightMax writes a rule's in-flight bound either way:
// MaxInFlight alone is InFlight.Max; both, different, are an error.
func TestMaxInFlightIsInFlightMax(t *testing.T) {
	m := newMemory(t)
	l, err := New(m, WithRules(Rule{Name: "r", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Rules()[0]; got.InFlight.Max != 3 || got.MaxInFlight != 0 {
		t.Errorf("the rule kept InFlight.Max %d, MaxInFlight %d; want 3 and 0", got.InFlight.Max, got.MaxInFlight)
	}
	_, err = New(m, WithRules(Rule{Name: "r", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3, InFlight: InFlight{Max: 4}}))
	if err == nil || !strings.Contains(err.Error(), "set one") {
		t.Errorf("MaxInFlight 3 and InFlight.Max 4: %v, want an error", err)
	}
}
