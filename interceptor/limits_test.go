package interceptor

import (
	"context"
	"slices"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// TestLimits: Fixed copies what it is given and Fixed() what it returns;
// the zero value and PerCaller have no fixed limits.
func TestLimits(t *testing.T) {
	given := []tollgate.Limit{tollgate.PerSecond(1), tollgate.PerHour(10)}
	ls := Fixed(given...)
	given[0] = tollgate.PerHour(1000)
	got := ls.Fixed()
	got[1] = tollgate.PerHour(1000)
	if want := []tollgate.Limit{tollgate.PerSecond(1), tollgate.PerHour(10)}; !slices.Equal(ls.Fixed(), want) || ls.PerCaller() {
		t.Fatalf("Fixed = %v (per caller %v), want %v", ls.Fixed(), ls.PerCaller(), want)
	}
	pc := PerCaller(func(context.Context, string) ([]tollgate.Limit, error) { return nil, nil })
	if !pc.PerCaller() || pc.Fixed() != nil {
		t.Fatalf("PerCaller: per caller %v, fixed %v", pc.PerCaller(), pc.Fixed())
	}
	var zero Limits
	if zero.PerCaller() || zero.Fixed() != nil {
		t.Fatal("the zero Limits has limits")
	}
}

// TestLimitsKeepTheirKeys: one fixed limit keeps its state under the
// identity's key as it is (as a rule's single Limit did before v1);
// several, and limits chosen per caller, each keep a part of it.
func TestLimitsKeepTheirKeys(t *testing.T) {
	perCaller := func(context.Context, string) ([]tollgate.Limit, error) {
		return []tollgate.Limit{tollgate.PerSecond(1)}, nil
	}
	for _, c := range []struct {
		name   string
		limits Limits
		multi  bool
	}{
		{"one", Fixed(tollgate.PerSecond(1)), false},
		{"several", Fixed(tollgate.PerSecond(1), tollgate.PerHour(10)), true},
		{"per caller", PerCaller(perCaller), true},
	} {
		l, err := New(nopStore{}, WithRules(Rule{Name: "r", Key: keyfunc.Method(), Limits: c.limits}))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p := l.book.Load().rules[0].call
		if p.multi != c.multi {
			t.Errorf("%s: limits in parts of the identity's key: %v, want %v", c.name, p.multi, c.multi)
		}
		for _, lp := range p.limits {
			if (lp.part != "") != c.multi {
				t.Errorf("%s: limit %s has part %q", c.name, lp.limit, lp.part)
			}
		}
	}
}

// TestFailModeNames: String is the tollgate.fail_mode attribute's value.
func TestFailModeNames(t *testing.T) {
	for m, want := range map[FailMode]string{FailOpen: "open", FailClosed: "closed", FailLocal: "local", 9: "failmode(9)"} {
		if m.String() != want {
			t.Errorf("FailMode %d is %q, want %q", m, m.String(), want)
		}
	}
}
