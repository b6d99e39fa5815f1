package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// TestLimits: Fixed copies what it is given and List what it returns;
// the zero value and PerCaller have no fixed limits.
func TestLimits(t *testing.T) {
	given := []tollgate.Limit{tollgate.PerSecond(1), tollgate.PerHour(10)}
	ls := Fixed(given...)
	given[0] = tollgate.PerHour(1000)
	got := ls.List()
	got[1] = tollgate.PerHour(1000)
	if want := []tollgate.Limit{tollgate.PerSecond(1), tollgate.PerHour(10)}; !slices.Equal(ls.List(), want) || ls.IsPerCaller() {
		t.Fatalf("List = %v (per caller %v), want %v", ls.List(), ls.IsPerCaller(), want)
	}
	pc := PerCaller(func(context.Context, string) ([]tollgate.Limit, error) { return nil, nil })
	if !pc.IsPerCaller() || pc.List() != nil {
		t.Fatalf("PerCaller: per caller %v, fixed %v", pc.IsPerCaller(), pc.List())
	}
	var zero Limits
	if zero.IsPerCaller() || zero.List() != nil {
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
		l, err := New(nopStore{}, Config{Rules: []Rule{{Name: "r", Key: keyfunc.Method(), Limits: c.limits}}})
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

// TestFailModeNames: String is the tollgate.fail_mode attribute's value;
// FailLocalAt is FailLocal with its cap, which LocalLimit reports.
func TestFailModeNames(t *testing.T) {
	at := FailLocalAt(tollgate.PerSecond(5))
	for m, want := range map[FailMode]string{FailOpen: "open", FailClosed: "closed", FailLocal: "local", at: "local", {}: "open"} {
		if m.String() != want {
			t.Errorf("FailMode %+v is %q, want %q", m, m.String(), want)
		}
	}
	if l, ok := at.LocalLimit(); !ok || l != tollgate.PerSecond(5) {
		t.Errorf("FailLocalAt's LocalLimit = %v, %v", l, ok)
	}
	for _, m := range []FailMode{FailOpen, FailClosed, FailLocal} {
		if _, ok := m.LocalLimit(); ok {
			t.Errorf("%v has a LocalLimit", m)
		}
	}
	if at == FailLocal || at != FailLocalAt(tollgate.PerSecond(5)) {
		t.Error("FailLocalAt compares by its cap")
	}
}

// TestMessageLimit: Shape's 0 wait is the default; a wait without Shape
// or below 0 is an error.
func TestMessageLimit(t *testing.T) {
	l := tollgate.PerSecond(3)
	if (MessageLimit{}).on() {
		t.Error("the zero MessageLimit limits messages")
	}
	for _, c := range []struct {
		m     MessageLimit
		wait  time.Duration
		shape bool
		bad   bool
	}{
		{m: MessageLimit{Limit: l}},
		{m: MessageLimit{Limit: l, Shape: true}, wait: defaultMaxShapeWait, shape: true},
		{m: MessageLimit{Limit: l, Shape: true, MaxWait: time.Second}, wait: time.Second, shape: true},
		{m: MessageLimit{Limit: l, MaxWait: time.Second}, bad: true},
		{m: MessageLimit{Limit: l, Shape: true, MaxWait: -time.Second}, bad: true},
	} {
		w, shape, err := c.m.maxWait()
		if (err != nil) != c.bad || w != c.wait || shape != c.shape {
			t.Errorf("%+v: maxWait = %s, %v, %v; want %s, %v, error %v", c.m, w, shape, err, c.wait, c.shape, c.bad)
		}
	}
}
