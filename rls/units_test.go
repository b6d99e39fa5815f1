package rls_test

import (
	"testing"
	"time"
)

const unitsYAML = `
domain: units
descriptors:
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: calendar_month
    rate_limit:
      unit: month
      requests_per_unit: 2
      tollgate: {calendar: true}
`

// TestLongUnits: week windows are 7 days and month windows 30 days, aligned
// to multiples of their length since the Unix epoch as envoyproxy/ratelimit
// aligns them; calendar: true makes a month a calendar month. Windows longer
// than tollgate.MaxPeriod, and calendar windows, load only where the Limit
// vocabulary accepts them; elsewhere the file is refused naming the
// descriptor.
func TestLongUnits(t *testing.T) {
	b := backends()[0]
	e := newEnv(t, b, []string{unitsYAML})
	for key, period := range map[string]time.Duration{"weekly": 7 * 24 * time.Hour, "monthly": 30 * 24 * time.Hour} {
		st := e.must(t, "units", 0, d(key, "x")).Statuses[0]
		if got, want := st.DurationUntilReset.AsDuration(), (period - time.Duration(fixedNow.UnixNano())%period).Round(time.Second); got != want {
			t.Fatalf("%s window resets in %s, want %s (aligned to the epoch)", key, got, want)
		}
	}
	st := e.must(t, "units", 0, d("calendar_month", "x")).Statuses[0]
	if got, want := st.DurationUntilReset.AsDuration(), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(fixedNow).Round(time.Second); got != want {
		t.Fatalf("calendar month resets in %s, want %s (1 April)", got, want)
	}
	if n := e.admitted(t, 3, "units", 0, d("calendar_month", "y")); n != 2 {
		t.Fatalf("calendar month: %d of 3 admitted, want 2", n)
	}
}
