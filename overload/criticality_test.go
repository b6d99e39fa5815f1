package overload

import (
	"context"
	"testing"
	"time"
)

func TestCriticalityNamesRoundTrip(t *testing.T) {
	for c := range Criticality(levels) {
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

// TestRetryAfterSpreadByCriticality: hints are jittered within ±50% of
// base × (Levels − criticality).
func TestRetryAfterSpreadByCriticality(t *testing.T) {
	base := 100 * time.Millisecond
	for c := range Criticality(levels) {
		mid := base * time.Duration(levels-int(c))
		seen := map[time.Duration]bool{}
		for range 200 {
			d := c.RetryAfter(base)
			if d < mid/2 || d >= mid*3/2 {
				t.Fatalf("RetryAfter(%v) = %s, want in [%s, %s)", c, d, mid/2, mid*3/2)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("RetryAfter(%v): %d distinct values in 200, want them spread", c, len(seen))
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
