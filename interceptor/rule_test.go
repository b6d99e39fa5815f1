package interceptor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// nopStore fails every decision; New never calls it. Methods other than
// Allow are not used.
type nopStore struct{ tollgate.Store }

func (nopStore) Allow(context.Context, tollgate.Request) (tollgate.Decision, error) {
	return tollgate.Decision{}, context.DeadlineExceeded
}

func testRule(name string, methods ...string) Rule {
	return Rule{Name: name, Methods: methods, Key: keyfunc.Method(), Limit: tollgate.PerSecond(10)}
}

func TestMatchFirstRuleWins(t *testing.T) {
	l, err := New(nopStore{}, WithRules(
		testRule("say", "/a.Echo/Say"),
		testRule("echo", "/a.Echo/*", "/b.Other/Exact"),
		testRule("count-shadowed-by-echo", "/a.Echo/Count", "/c.Third/One"),
		testRule("other", "/b.Other/*"),
		testRule("rest"),
	))
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]string{
		"/a.Echo/Say":    "say",
		"/a.Echo/Count":  "echo", // the wildcard comes first
		"/a.Echo/Chat":   "echo",
		"/b.Other/Exact": "echo",
		"/b.Other/Else":  "other",
		"/c.Third/One":   "count-shadowed-by-echo",
		"/c.Third/Two":   "rest",
		"/d.X/Y":         "rest",
		"":               "rest",
		"garbage":        "rest",
	} {
		r := l.matcher.match(method)
		if r == nil || r.Name != want {
			t.Errorf("match(%q) = %v, want rule %q", method, r, want)
		}
	}
}

func TestMatchNoCatchAllLeavesOthersUnlimited(t *testing.T) {
	l, err := New(nopStore{}, WithRules(testRule("say", "/a.Echo/Say"), testRule("svc", "/b.S/*")))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/a.Echo/Count", "/a.Echo/Sayx", "/b.Sx/M", "/b.S", "", "/grpc.health.v1.Health/Check"} {
		if r := l.matcher.match(m); r != nil {
			t.Errorf("match(%q) = rule %q, want none", m, r.Name)
		}
	}
	if r := l.matcher.match("/b.S/Anything"); r == nil || r.Name != "svc" {
		t.Errorf("match(/b.S/Anything) = %v, want svc", r)
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
		{"no rules", nil, nopStore{}, "no rules"},
		{"empty name", []Option{WithRules(with(func(r *Rule) { r.Name = "" }))}, nopStore{}, "rule 0: Name is empty"},
		{"control char", []Option{WithRules(with(func(r *Rule) { r.Name = "a\x00b" }))}, nopStore{}, "control character"},
		{"long name", []Option{WithRules(with(func(r *Rule) { r.Name = strings.Repeat("n", MaxRuleNameLen+1) }))}, nopStore{}, "more than 128"},
		{"bad utf8", []Option{WithRules(with(func(r *Rule) { r.Name = "\xff" }))}, nopStore{}, "UTF-8"},
		{"duplicate", []Option{WithRules(ok, testRule("r", "/x.Y/Z"))}, nopStore{}, `rule "r": the name is used by an earlier rule`},
		{"nil key", []Option{WithRules(with(func(r *Rule) { r.Key = nil }))}, nopStore{}, `rule "r": Key is nil`},
		{"bad limit", []Option{WithRules(with(func(r *Rule) { r.Limit = tollgate.Limit{Rate: 0, Period: time.Second} }))}, nopStore{}, `rule "r": Limit:`},
		{"cost above capacity", []Option{WithRules(with(func(r *Rule) { r.Cost = 11 }))}, nopStore{}, `rule "r": Limit: tollgate: invalid request: cost 11 exceeds the capacity 10`},
		{"negative cost", []Option{WithRules(with(func(r *Rule) { r.Cost = -1 }))}, nopStore{}, `rule "r": Cost must be >= 0`},
		{"no slash", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"a.B/C"} }))}, nopStore{}, `rule "r": method "a.B/C" is not of the form`},
		{"no method", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/"} }))}, nopStore{}, "is not of the form"},
		{"no service", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"//C"} }))}, nopStore{}, "is not of the form"},
		{"three parts", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a/B/C"} }))}, nopStore{}, "is not of the form"},
		{"partial star", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/Get*"} }))}, nopStore{}, `"*" may only stand alone`},
		{"star service", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/*/C"} }))}, nopStore{}, `"*" may only stand alone`},
		{"space", []Option{WithRules(with(func(r *Rule) { r.Methods = []string{"/a.B/C D"} }))}, nopStore{}, "white space"},
		{"fail mode", []Option{WithRules(with(func(r *Rule) { r.FailMode = 9 }))}, nopStore{}, `rule "r": unknown FailMode 9`},
		{"stream mode", []Option{WithRules(with(func(r *Rule) { r.StreamMode = 9 }))}, nopStore{}, "unknown StreamMode"},
		{"missing policy", []Option{WithRules(with(func(r *Rule) { r.OnMissingKey = 9 }))}, nopStore{}, "unknown OnMissingKey"},
		{"per message", []Option{WithRules(with(func(r *Rule) { r.PerMessage = &tollgate.Limit{Rate: 1} }))}, nopStore{}, `rule "r": PerMessage:`},
		{"local limit too small", []Option{WithRules(with(func(r *Rule) { r.FailMode, r.Cost, r.LocalLimit = FailLocal, 2, &big }))}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"replicas leave no room for cost", []Option{WithReplicas(10), WithRules(with(func(r *Rule) { r.FailMode, r.Cost = FailLocal, 5 }))}, nopStore{}, `rule "r": local limit for FailLocal`},
		{"unreachable after catch-all", []Option{WithRules(testRule("all"), ok)}, nopStore{}, `rule "r" is unreachable`},
		{"unreachable exact", []Option{WithRules(testRule("svc", "/a.B/*"), ok)}, nopStore{}, `rule "r" is unreachable`},
		{"second catch-all", []Option{WithRules(testRule("all"), testRule("all2"))}, nopStore{}, `rule "all2" is unreachable`},
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
	l, err := New(nopStore{}, WithReplicas(4), WithBreaker(0, 0), WithRules(
		Rule{Name: "per-tenant ✓", Methods: []string{"/a.B/C", "/a.B/D"}, Key: keyfunc.Metadata("x-tenant"), Limit: tollgate.PerMinute(100), Cost: 3, FailMode: FailLocal},
		Rule{Name: "stream", Methods: []string{"/a.S/*"}, Key: keyfunc.Method(), Limit: tollgate.PerSecond(1), PerMessage: &per, StreamMode: Shape, FailMode: FailLocal},
		Rule{Name: "dynamic", Key: keyfunc.Method(), LimitFunc: func(context.Context, string) (tollgate.Limit, error) { return per, nil }, LocalLimit: &local, FailMode: FailLocal},
	))
	if err != nil {
		t.Fatal(err)
	}
	// WithReplicas(4) divides the static limit for FailLocal, rounding up.
	if got, want := l.rules[0].call.limits[0].local, (tollgate.Limit{Rate: 25, Period: time.Minute, Burst: 25}); got != want {
		t.Errorf("local limit = %v, want %v", got, want)
	}
	if l.local == nil {
		t.Error("FailLocal rules but no local store")
	}
	if l.rules[1].maxShapeWait != DefaultMaxShapeWait {
		t.Errorf("maxShapeWait = %s, want the default %s", l.rules[1].maxShapeWait, DefaultMaxShapeWait)
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
	for _, r := range l.rules {
		for _, s := range []scope{scopeCall, scopeMessage} {
			p := newPlan(r, s, nil, 1)
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
