package tollgate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// TestLimitSizes checks the bounds of Limit.Validate: the sizes real quotas
// need are accepted, and what lies beyond is refused with an error naming
// the bound it passes.
func TestLimitSizes(t *testing.T) {
	day := 24 * time.Hour
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		for _, l := range []tollgate.Limit{
			{Rate: 100, Period: time.Second, Burst: 200},
			{Rate: 100_000, Period: day},
			{Rate: 1_000_000_000, Period: 30 * day},
			{Rate: 5, Period: 365 * day},
			{Rate: 1_000_000_000_000, Period: day},
			{Rate: tollgate.MaxRate, Period: time.Millisecond, Burst: tollgate.MaxRate},
			{Rate: tollgate.MaxRate, Period: tollgate.MaxPeriod, Burst: tollgate.MaxRate},
			{Rate: 1, Period: 366 * day},
		} {
			l.Algorithm = alg
			if err := l.Validate(); err != nil {
				t.Errorf("%s: %v, want valid", l, err)
			}
		}
	}
	for _, l := range []tollgate.Limit{tollgate.Daily(1), tollgate.Weekly(7), tollgate.Monthly(1_000_000), tollgate.Yearly(tollgate.MaxRate)} {
		if err := l.Validate(); err != nil {
			t.Errorf("%s: %v, want valid", l, err)
		}
	}

	bad := []struct {
		limit tollgate.Limit
		names string // a part of the error that names the bound
	}{
		{tollgate.Limit{Rate: 10_000_000_000_000, Period: day}, "MaxRate (10^12)"},
		{tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: tollgate.MaxRate + 1, Period: day}, "MaxRate (10^12)"},
		{tollgate.Limit{Rate: 10, Period: day, Burst: tollgate.MaxRate + 1}, "MaxRate (10^12)"},
		{tollgate.Limit{Rate: 10, Period: 2 * 365 * day}, "MaxPeriod (366 days)"},
		{tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10, Period: tollgate.MaxPeriod + time.Microsecond}, "MaxPeriod (366 days)"},
		{tollgate.Limit{Rate: 1, Period: tollgate.MaxPeriod, Burst: 101}, "MaxRefill (100 years)"},
		{tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 1, Period: 10 * time.Millisecond, Burst: tollgate.MaxRate}, "MaxRefill (100 years)"},
		{tollgate.Limit{Rate: 1, Period: 999 * time.Microsecond}, "at least 1ms"},
		{tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 10, Calendar: tollgate.Month}, "needs the fixed_window algorithm"},
		{tollgate.Limit{Rate: 10, Calendar: tollgate.Day}, "needs the fixed_window algorithm"},
		{tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10, Period: day, Calendar: tollgate.Day}, "period must be 0"},
		{tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10, Calendar: tollgate.Year + 1}, "unknown calendar"},
		{tollgate.Monthly(0), "rate must be > 0"},
	}
	for _, b := range bad {
		err := b.limit.Validate()
		if !errors.Is(err, tollgate.ErrInvalidRequest) || !strings.Contains(err.Error(), b.names) {
			t.Errorf("%+v: %v, want an error wrapping ErrInvalidRequest that says %q", b.limit, err, b.names)
		}
	}
	// Just within and just beyond MaxRefill, and far beyond it with a
	// rate whose quotient would fit 64 bits only when truncated.
	edge := tollgate.Limit{Rate: 1, Period: tollgate.MaxRefill / 100, Burst: 100}
	if err := edge.Validate(); err != nil {
		t.Errorf("%s refills in exactly MaxRefill: %v", edge, err)
	}
	for _, l := range []tollgate.Limit{
		{Rate: 3, Period: tollgate.MaxRefill/100 + time.Microsecond, Burst: 300},
		{Rate: 100, Period: tollgate.MaxRefill / 100, Burst: 10_001},
		{Rate: 1_000_000, Period: tollgate.MaxPeriod, Burst: tollgate.MaxRate},
	} {
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "MaxRefill") {
			t.Errorf("%s refills in more than MaxRefill: %v, want refused", l, err)
		}
	}
}

func TestLimitString(t *testing.T) {
	for l, want := range map[tollgate.Limit]string{
		tollgate.Monthly(1_000_000): "monthly 1000000",
		tollgate.Daily(5):           "daily 5",
		tollgate.Weekly(5):          "weekly 5",
		tollgate.Yearly(5):          "yearly 5",
		tollgate.PerSecond(100):     "token_bucket 100/1s burst 100",
		{Algorithm: tollgate.FixedWindow, Rate: 10, Period: time.Minute}: "fixed_window 10/1m0s",
	} {
		if got := l.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", l, got, want)
		}
	}
}

// Calendar.Length is a calendar unit's length at a time, in UTC: the one
// every package reads (the RateLimit-Policy window, a region's check, an
// RLQS bucket's fill interval).
func TestCalendarLength(t *testing.T) {
	day := 24 * time.Hour
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, c := range []struct {
		cal  tollgate.Calendar
		at   string
		want time.Duration
	}{
		{tollgate.NoCalendar, "2026-03-02T10:00:00Z", 0},
		{tollgate.Day, "2026-03-02T10:00:00Z", day},
		{tollgate.Week, "2026-03-02T10:00:00Z", 7 * day},
		{tollgate.Month, "2026-02-14T00:00:00Z", 28 * day},
		{tollgate.Month, "2024-02-14T00:00:00Z", 29 * day},
		{tollgate.Month, "2026-04-30T23:59:59Z", 30 * day},
		{tollgate.Month, "2026-12-31T23:00:00-05:00", 31 * day}, // January 1 in UTC
		{tollgate.Year, "2026-06-01T00:00:00Z", 365 * day},
		{tollgate.Year, "2024-06-01T00:00:00Z", 366 * day},
	} {
		if got := c.cal.Length(at(c.at)); got != c.want {
			t.Errorf("%v at %s: %s, want %s", c.cal, c.at, got, c.want)
		}
	}
}
