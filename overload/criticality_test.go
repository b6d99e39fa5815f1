package overload

import (
	"context"
	"testing"
)

func TestCriticalityNamesRoundTrip(t *testing.T) {
	for c := range Criticality(Levels) {
		got, err := ParseCriticality(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCriticality(%q) = %v, %v", c.String(), got, err)
		}
	}
	for _, s := range []string{"critical-plus", " Critical ", "SHEDDABLE_plus"} {
		if _, err := ParseCriticality(s); err != nil {
			t.Errorf("ParseCriticality(%q): %v", s, err)
		}
	}
	if _, err := ParseCriticality("URGENT"); err == nil {
		t.Error("ParseCriticality(URGENT) = nil error")
	}
	if s := Criticality(9).String(); s != "Criticality(9)" {
		t.Errorf("String of an unknown criticality = %q", s)
	}
}

// TestBadHeaderNeverRaisesCriticality: a value that does not parse counts
// as the default, never higher, and says why.
func TestBadHeaderNeverRaisesCriticality(t *testing.T) {
	for _, h := range []map[string]string{
		{Header: "ULTRA"},
		{FailsafeHeader: "7"},
		{FailsafeHeader: "high"},
	} {
		c, err := FromHeaders(func(k string) string { return h[k] })
		if err == nil || c != DefaultCriticality {
			t.Errorf("FromHeaders(%v) = %v, %v; want the default and an error", h, c, err)
		}
	}
	c, err := FromHeaders(func(k string) string { return map[string]string{Header: "SHEDDABLE", FailsafeHeader: "4"}[k] })
	if err != nil || c != Sheddable {
		t.Errorf("with both headers: %v, %v; want Header's Sheddable", c, err)
	}
	for p, want := range []Criticality{Sheddable, SheddablePlus, Critical, Critical, CriticalPlus} {
		if c, err := FromFailsafe(string(rune('0' + p))); err != nil || c != want {
			t.Errorf("FromFailsafe(%d) = %v, %v; want %v", p, c, err, want)
		}
	}
}

func TestCriticalityInContext(t *testing.T) {
	if _, ok := CriticalityFrom(context.Background()); ok {
		t.Fatal("a bare context carries a criticality")
	}
	c, ok := CriticalityFrom(WithCriticality(context.Background(), Sheddable))
	if !ok || c != Sheddable {
		t.Fatalf("got %v, %v", c, ok)
	}
}
