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
	l, err := New(nopStore{}, Config{Rules: []Rule{testRule("say", "/a.Echo/Say"), testRule("echo", "/a.Echo/*", "/b.Other/Exact"), testRule("count", "/a.Echo/Count", "/c.Third/One"), testRule("other", "/b.Other/*"), testRule("rest")}})
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
	l, err := New(nopStore{}, Config{Rules: []Rule{say, echo, testRule("tenant", "/a.Echo/Say"), testRule("global")}})
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
	l, err := New(nopStore{}, Config{Rules: []Rule{testRule("say", "/a.Echo/Say"), testRule("svc", "/b.S/*")}})
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
		cfg   Config
		store tollgate.Store
		want  string // substring of the error
	}{
		{"no store", Config{Rules: []Rule{ok}}, nil, "store is nil"},
		{"typed nil store", Config{Rules: []Rule{ok}}, (*store.Memory)(nil), "store is nil"},
		{"typed nil local store", Config{Rules: []Rule{ok}, LocalStore: (*store.Memory)(nil)}, nopStore{}, "the LocalStore is a nil pointer"},
		{"no rules", Config{}, nopStore{}, "no rules"},
		{"empty name", Config{Rules: []Rule{with(func(r *Rule) { r.Name = "" })}}, nopStore{}, "rule 0: Name is empty"},
		{"control char", Config{Rules: []Rule{with(func(r *Rule) { r.Name = "a\x00b" })}}, nopStore{}, "control character"},
		{"long name", Config{Rules: []Rule{with(func(r *Rule) { r.Name = strings.Repeat("n", maxRuleNameLen+1) })}}, nopStore{}, "more than 128"},
		{"bad utf8", Config{Rules: []Rule{with(func(r *Rule) { r.Name = "\xff" })}}, nopStore{}, "UTF-8"},
		{"duplicate", Config{Rules: []Rule{ok, testRule("r", "/x.Y/Z")}}, nopStore{}, `rule "r": the name is used by an earlier rule`},
		{"nil key", Config{Rules: []Rule{with(func(r *Rule) { r.Key = nil })}}, nopStore{}, `rule "r": Key is nil`},
		{"bad header", Config{Rules: []Rule{with(func(r *Rule) { r.Key = keyfunc.Metadata("X Tenant") })}}, nopStore{}, `rule "r": Key: keyfunc.Metadata: "X Tenant" is not a valid gRPC metadata key`},
		{"empty constant", Config{Rules: []Rule{with(func(r *Rule) { r.Key = keyfunc.Constant("") })}}, nopStore{}, `rule "r": Key: keyfunc.Constant: the value is 0 bytes`},
		{"nil context key", Config{Rules: []Rule{with(func(r *Rule) { r.Key = keyfunc.Context(nil) })}}, nopStore{}, `rule "r": Key: keyfunc.Context: the key is nil`},
		{"empty join", Config{Rules: []Rule{with(func(r *Rule) { r.Key = keyfunc.Join() })}}, nopStore{}, `rule "r": Key: keyfunc.Join: no Func given`},
		{"nil in first-of", Config{Rules: []Rule{with(func(r *Rule) { r.Key = keyfunc.FirstOf(keyfunc.Peer(), nil) })}}, nopStore{}, `rule "r": Key: keyfunc.FirstOf: Func 1: keyfunc: the Func is nil`},
		{"bad limit", Config{Rules: []Rule{with(func(r *Rule) { r.Limits = Fixed(tollgate.Limit{Rate: 0, Period: time.Second}) })}}, nopStore{}, `rule "r": Limits[0]:`},
		{"cost above capacity", Config{Rules: []Rule{with(func(r *Rule) { r.Cost = 11 })}}, nopStore{}, `rule "r": Limits[0]: cost 11 exceeds the capacity 10`},
		{"settle in-flight only", Config{Rules: []Rule{with(func(r *Rule) {
			r.Limits, r.InFlight = Limits{}, InFlight{Max: 2}
			r.Settle = SettleReported
		})}}, newMemory(t), `rule "r": Settle needs a rate limit to settle`},
		{"settle without a settler", Config{Rules: []Rule{with(func(r *Rule) { r.Settle = SettleReported })}}, nopStore{}, `rule "r": Settle needs a store that settles (tollgate.Settler)`},
		{"settle locally without a settler", Config{LocalStore: nopStore{}, Rules: []Rule{with(func(r *Rule) {
			r.Settle, r.FailMode = SettleReported, FailLocal
		})}}, newMemory(t), `rule "r": Settle with FailLocal needs a local store that settles (tollgate.Settler)`},
		{"fail local without a local store", Config{Rules: []Rule{with(func(r *Rule) { r.FailMode = FailLocal })}}, nopStore{}, `rule "r": FailLocal needs a local store to decide in: give the Limiter one (Config.LocalStore`},
		{"fail local in flight without local seats", Config{LocalStore: nopStore{}, Rules: []Rule{with(func(r *Rule) {
			r.FailMode, r.InFlight = FailLocal, InFlight{Max: 2}
		})}}, newMemory(t), `rule "r": InFlight with FailLocal needs a local store that bounds calls in flight`},
		{"no limit", Config{Rules: []Rule{with(func(r *Rule) { r.Limits = Limits{} })}}, nopStore{}, `rule "r": no limit: set Limits (Fixed or PerCaller), or InFlight`},
		{"nil PerCaller", Config{Rules: []Rule{with(func(r *Rule) { r.Limits = PerCaller(nil) })}}, nopStore{}, `rule "r": Limits: PerCaller's function is nil`},
		{"negative cost", Config{Rules: []Rule{with(func(r *Rule) { r.Cost = -1 })}}, nopStore{}, `rule "r": Cost must be >= 0`},
		{"no slash", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"a.B/C"} })}}, nopStore{}, `rule "r": method "a.B/C" is neither a gRPC method`},
		{"no method", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/a.B/"} })}}, nopStore{}, "is a path without its HTTP method"},
		{"no service", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"//C"} })}}, nopStore{}, "is a path without its HTTP method"},
		{"three parts", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/a/B/C"} })}}, nopStore{}, "is a path without its HTTP method"},
		{"bare path", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/v1/orders"} })}}, nopStore{}, `"/v1/orders" is a path without its HTTP method, which no call is named by: write an HTTP route as the method and the ServeMux pattern ("POST /v1/orders", "GET /v1/orders")`},
		{"lower-case service without a package", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/orders/*"} })}}, nopStore{}, "is a path without its HTTP method"},
		{"unclosed wildcard", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"POST /v1/orders/{id"} })}}, nopStore{}, `route "POST /v1/orders/{id" is not a ServeMux pattern`},
		{"wildcard twice", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"GET /v1/{a}/{a}"} })}}, nopStore{}, `route "GET /v1/{a}/{a}" is not a ServeMux pattern`},
		{"lower-case method", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"get /v1/orders"} })}}, nopStore{}, "starts with its method in capitals"},
		{"partial star", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/a.B/Get*"} })}}, nopStore{}, `"*" may only stand alone`},
		{"star service", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/*/C"} })}}, nopStore{}, `"*" may only stand alone`},
		{"space", Config{Rules: []Rule{with(func(r *Rule) { r.Methods = []string{"/a.B/C D"} })}}, nopStore{}, "white space"},
		{"shape wait", Config{Rules: []Rule{with(func(r *Rule) {
			r.PerMessage = MessageLimit{Limit: tollgate.PerSecond(1), Shape: true, MaxWait: -time.Second}
		})}}, nopStore{}, `rule "r": PerMessage.MaxWait must be >= 0`},
		{"per message", Config{Rules: []Rule{with(func(r *Rule) { r.PerMessage = MessageLimit{Limit: tollgate.Limit{Rate: 1}} })}}, nopStore{}, `rule "r": PerMessage:`},
		{"local limit too small", Config{LocalStore: nopStore{}, Rules: []Rule{with(func(r *Rule) { r.FailMode, r.Cost = FailLocalAt(big), 2 })}}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"local limit invalid", Config{LocalStore: nopStore{}, Rules: []Rule{with(func(r *Rule) { r.FailMode = FailLocalAt(tollgate.Limit{}) })}}, nopStore{}, `rule "r": local limit for FailLocal: rate must be`},
		{"replicas leave no room for cost", Config{LocalStore: nopStore{}, Replicas: 10, Rules: []Rule{with(func(r *Rule) { r.FailMode, r.Cost = FailLocal, 5 })}}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"replaced everywhere by a catch-all", Config{Rules: []Rule{replacing("all", nil, "r"), ok}}, nopStore{}, `rule "r" never applies`},
		{"replaced everywhere by a service", Config{Rules: []Rule{replacing("svc", []string{"/a.B/*"}, "r"), ok}}, nopStore{}, `rule "r" never applies`},
		{"replaced everywhere by several", Config{Rules: []Rule{replacing("x", []string{"/a.B/C"}, "two"), replacing("y", []string{"/z.Z/*"}, "two"), testRule("two", "/a.B/C", "/z.Z/Q")}}, nopStore{}, `rule "two" never applies`},
		{"replaces unknown", Config{Rules: []Rule{replacing("x", nil, "nope")}}, nopStore{}, `rule "x" replaces "nope", which is not a rule`},
		{"replaces itself", Config{Rules: []Rule{replacing("x", nil, "x")}}, nopStore{}, `rule "x" replaces itself`},
		{"replaces disjoint", Config{Rules: []Rule{replacing("x", []string{"/a.B/D"}, "r"), ok}}, nopStore{}, `rule "x" replaces "r", but no method matches both`},
		{"replace cycle", Config{Rules: []Rule{replacing("x", []string{"/a.B/*"}, "y"), replacing("y", []string{"/a.B/C", "/a.B/D"}, "x")}}, nopStore{}, `rules replace each other in a cycle: "x" replaces "y" replaces "x"`},
		{"empty limits", Config{Rules: []Rule{with(func(r *Rule) { r.Limits = Fixed() })}}, nopStore{}, `rule "r": Limits has 0 limits`},
		{"bad limits", Config{Rules: []Rule{with(func(r *Rule) {
			r.Limits = Fixed(tollgate.PerSecond(1), tollgate.Limit{Rate: 1})
		})}}, nopStore{}, `rule "r": Limits[1]:`},
		{"limits sharing state", Config{Rules: []Rule{with(func(r *Rule) {
			r.Limits = Fixed(tollgate.PerSecond(10), tollgate.PerHour(9), tollgate.Limit{Rate: 20, Period: time.Second})
		})}}, nopStore{}, `rule "r": Limits: limits 0 (token_bucket 10/1s burst 10) and 2 (token_bucket 20/1s burst 20) have the same algorithm and period`},
		{"negative in-flight", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight.Max = -1 })}}, nopStore{}, `rule "r": InFlight.Max must be >= 0`},
		{"negative seat timeout", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight = InFlight{Max: 2, SeatTimeout: -time.Second} })}}, nopStore{}, `rule "r": InFlight.SeatTimeout must be >= 0`},
		{"negative stream wait", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight = InFlight{Max: 2, StreamWait: -time.Second} })}}, nopStore{}, `rule "r": InFlight.StreamWait must be >= 0`},
		{"seat timeout without max", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight = InFlight{SeatTimeout: time.Second} })}}, nopStore{}, `rule "r": InFlight has a SeatTimeout or a StreamWait but no Max`},
		{"seat timeout below 1ms", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight = InFlight{Max: 2, SeatTimeout: time.Microsecond} })}}, nopStore{}, `rule "r": InFlight.SeatTimeout is below 1ms`},
		{"in-flight without slots", Config{Rules: []Rule{with(func(r *Rule) { r.InFlight.Max = 2 })}}, nopStore{}, `rule "r": InFlight needs a store that bounds calls in flight`},
		{"store timeout", Config{Rules: []Rule{ok}, StoreTimeout: -1}, nopStore{}, "StoreTimeout must be >= 0"},
		{"breaker cool-down", Config{Rules: []Rule{ok}, BreakerFailures: 3, BreakerCoolDown: -1}, nopStore{}, "BreakerCoolDown must be >= 0"},
		{"replicas", Config{Rules: []Rule{ok}, Replicas: -1}, nopStore{}, "Replicas must be >= 0"},
		{"seat timeout", Config{Rules: []Rule{ok}, SeatTimeout: -1}, nopStore{}, "SeatTimeout must be >= 0"},
		{"override refresh", Config{Rules: []Rule{ok}, OverrideRefresh: -1}, nopStore{}, "OverrideRefresh must be >= 0"},
		{"header case", Config{Rules: []Rule{ok}, RequestIDHeader: "X-Request-Id"}, nopStore{}, "metadata keys are lower-case"},
		{"header reserved", Config{Rules: []Rule{ok}, RequestIDHeader: "grpc-id"}, nopStore{}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.store, tc.cfg)
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
	l, err := New(nopStore{}, Config{Replicas: 4, BreakerFailures: -1, BreakerCoolDown: 0, LocalStore: newMemory(t), Rules: []Rule{{Name: "per-tenant ✓", Methods: []string{"/a.B/C", "/a.B/D"}, Key: keyfunc.Metadata("x-tenant"), Limits: Fixed(tollgate.PerMinute(100)), Cost: 3, FailMode: FailLocal}, {Name: "stream", Methods: []string{"/a.S/*"}, Key: keyfunc.Method(), Limits: Fixed(tollgate.PerSecond(1)), PerMessage: MessageLimit{Limit: per, Shape: true}, FailMode: FailLocal}, {Name: "dynamic", Key: keyfunc.Method(), Limits: PerCaller(func(context.Context, string) ([]tollgate.Limit, error) { return []tollgate.Limit{per}, nil }), FailMode: FailLocalAt(local)}}})
	if err != nil {
		t.Fatal(err)
	}
	// Replicas: 4 divides the static limit for FailLocal, rounding up.
	if got, want := l.book.Load().rules[0].call.limits[0].local, (tollgate.Limit{Rate: 25, Period: time.Minute, Burst: 25}); got != want {
		t.Errorf("local limit = %v, want %v", got, want)
	}
	if got := l.book.Load().rules[2].call.explicitLocal; got == nil || *got != local {
		t.Errorf("FailLocalAt's cap = %v, want %v", got, local)
	}
	if l.book.Load().rules[1].maxShapeWait != defaultMaxShapeWait {
		t.Errorf("maxShapeWait = %s, want the default %s", l.book.Load().rules[1].maxShapeWait, defaultMaxShapeWait)
	}
}

// Store keys of different rules, scopes and the anonymous identity never
// coincide, whatever the key function returns.
func TestKeyPrefixesAreUnambiguous(t *testing.T) {
	l, err := New(nopStore{}, Config{Rules: []Rule{testRule("a", "/x.Y/A"), testRule("a:", "/x.Y/B"), testRule("ab", "/x.Y/C")}})
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
	l, err := New(m, Config{Rules: []Rule{{Name: "r", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Rules()[0]; got.InFlight.Max != 3 || got.MaxInFlight != 0 {
		t.Errorf("the rule kept InFlight.Max %d, MaxInFlight %d; want 3 and 0", got.InFlight.Max, got.MaxInFlight)
	}
	_, err = New(m, Config{Rules: []Rule{{Name: "r", Key: keyfunc.Metadata("x-tenant"), MaxInFlight: 3, InFlight: InFlight{Max: 4}}}})
	if err == nil || !strings.Contains(err.Error(), "set one") {
		t.Errorf("MaxInFlight 3 and InFlight.Max 4: %v, want an error", err)
	}
}
