package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// TestCalendarBoundaries runs the fixed-window script with calendar windows
// at chosen instants either side of the boundaries that calendars get wrong
// (the end of February in leap and common years and in 2100, which is not
// leap; 31 December; Sunday to Monday) and checks that the window ends
// exactly where Go's time package says: one unit of a limit of 1 is
// admitted an hour before the boundary with a reset of 1h, the next is
// denied a microsecond before it with a retry of 1µs, and at the boundary a
// new window admits it with a reset of the whole next window.
func TestCalendarBoundaries(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	script := redis.NewScript(lua.SourceAt())
	date := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	cases := []struct {
		cal      tollgate.Calendar
		boundary time.Time
		next     time.Time // the boundary after it
	}{
		{tollgate.Month, date(2024, 3, 1), date(2024, 4, 1)},
		{tollgate.Month, date(2024, 2, 1), date(2024, 3, 1)}, // 29 days
		{tollgate.Month, date(2023, 3, 1), date(2023, 4, 1)},
		{tollgate.Month, date(2100, 3, 1), date(2100, 4, 1)},
		{tollgate.Month, date(2000, 3, 1), date(2000, 4, 1)},
		{tollgate.Month, date(2027, 1, 1), date(2027, 2, 1)},
		{tollgate.Month, date(2026, 12, 1), date(2027, 1, 1)},
		{tollgate.Year, date(2027, 1, 1), date(2028, 1, 1)},
		{tollgate.Year, date(2024, 1, 1), date(2025, 1, 1)}, // 366 days
		{tollgate.Year, date(2100, 1, 1), date(2101, 1, 1)},
		{tollgate.Day, date(2024, 2, 29), date(2024, 3, 1)},
		{tollgate.Day, date(2027, 1, 1), date(2027, 1, 2)},
		{tollgate.Week, date(2026, 12, 7), date(2026, 12, 14)}, // Sunday 6 → Monday 7
		{tollgate.Week, date(2027, 1, 4), date(2027, 1, 11)},   // across the new year
		{tollgate.Week, date(2024, 3, 4), date(2024, 3, 11)},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s", tc.cal, tc.boundary.Format(time.DateOnly)), func(t *testing.T) {
			if tc.cal == tollgate.Week && tc.boundary.Weekday() != time.Monday {
				t.Fatalf("%s is not a Monday", tc.boundary)
			}
			key := fmt.Sprintf("%s{cal-%d}:fw", redistest.KeyPrefix(t), i)
			p := algo.ParamsOf(tollgate.Request{Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1, Calendar: tc.cal}, Cost: 1})
			at := func(ts time.Time) []int64 {
				t.Helper()
				us := ts.UnixMicro()
				r, err := script.Run(ctx, c, withLineage(key), "", 0, int(tollgate.FixedWindow), p.Rate, p.Period, p.Capacity, p.Cost, us/1e6, us%1e6).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			// An hour before, so that the key's real TTL outlasts the test.
			if r := at(tc.boundary.Add(-time.Hour)); r[0] != 1 || r[3] != time.Hour.Microseconds() {
				t.Fatalf("an hour before the boundary: %v, want admitted with a reset of 1h", r)
			}
			if r := at(tc.boundary.Add(-time.Microsecond)); r[0] != 0 || r[2] != 1 || r[3] != 1 {
				t.Fatalf("1µs before the boundary: %v, want denied, retry and reset 1µs", r)
			}
			whole := tc.next.Sub(tc.boundary).Microseconds()
			if r := at(tc.boundary); r[0] != 1 || r[3] != whole {
				t.Fatalf("at the boundary: %v, want admitted in a new window, reset %d (%s)", r, whole, tc.next.Sub(tc.boundary))
			}
			if r := at(tc.next.Add(-time.Microsecond)); r[0] != 0 || r[2] != 1 {
				t.Fatalf("1µs before the next boundary: %v, want still denied, retry 1µs", r)
			}
			// The key lives until the window's end (plus the 2ms margin).
			ttl, err := c.PTTL(ctx, key).Result()
			if err != nil || ttl > time.Duration(whole)*time.Microsecond+2*time.Millisecond || ttl < time.Duration(whole)*time.Microsecond-time.Second {
				t.Fatalf("state TTL %s (%v), want the window's %s", ttl, err, time.Duration(whole)*time.Microsecond)
			}
		})
	}
}
