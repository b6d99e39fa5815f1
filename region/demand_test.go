package region

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// TestDemandOfOneProcess walks a process's demand through the cases
// demand.add is written for, a lease of three intervals of 400 ms on a
// rate of 600/s: a new entry asking little reports a lease's average, one
// asking much reports what it asked at once, the swings of few requests
// even out, a move is followed at once, and the rounding is carried.
func TestDemandOfOneProcess(t *testing.T) {
	const interval, lease = 400 * time.Millisecond, 1200 * time.Millisecond
	sh := &shared{limit: tollgate.PerSecond(600)}
	per := func(n int64) sample { return sample{units: n, requests: n, elapsed: interval} }
	report := func(d *demand, n int64) int64 { return d.add(sh, per(n), lease, interval) }

	t.Run("a new entry asking little reports a lease's average", func(t *testing.T) {
		d := demand{size: 3}
		// 1 request in 400 ms over a lease of 1.2 s: 0.83/s, a sixteenth more: 0.89, rounded 1.
		if got := report(&d, 1); got != 1 {
			t.Errorf("reported %d/s, want 1", got)
		}
	})
	t.Run("a new entry asking much reports it at once", func(t *testing.T) {
		d := demand{size: 3}
		// 400 requests in 400 ms: 1,000/s, a sixteenth more: 1,062.5, rounded half up.
		if got := report(&d, 400); got != 1063 {
			t.Errorf("reported %d/s, want 1063", got)
		}
	})
	t.Run("swings of few requests even out over the lease", func(t *testing.T) {
		d := demand{size: 3}
		for _, n := range []int64{4, 4, 4} { // 10/s
			report(&d, n)
		}
		// 2 then 6 requests an interval: within the noise of 4, the
		// demand stays about 10/s (10.6 with the sixteenth), not 5 or 15.
		for _, n := range []int64{2, 6, 2, 6} {
			if got := report(&d, n); got < 9 || got > 13 {
				t.Errorf("after an interval of %d requests: reported %d/s, want about 10.6", n, got)
			}
		}
	})
	t.Run("a move is followed at once", func(t *testing.T) {
		d := demand{size: 3}
		for range 3 {
			report(&d, 400) // 1,000/s
		}
		// 10/s, a sixteenth more: 10.6, give or take the rounding carried.
		if got := report(&d, 4); got != 10 && got != 11 {
			t.Errorf("after a fall to 10/s: reported %d/s, want 10 or 11", got)
		}
		if got := report(&d, 400); got != 1062 && got != 1063 {
			t.Errorf("after a surge back to 1,000/s: reported %d/s, want 1062 or 1063", got)
		}
	})
	t.Run("the rounding is carried", func(t *testing.T) {
		d := demand{size: 1}
		// 1 request in 800 ms: 1.25/s, a sixteenth more: 1.328/s. Reports
		// of whole units add up to it over many reports.
		var sum int64
		const reports = 64
		for range reports {
			sum += d.add(sh, sample{units: 1, requests: 1, elapsed: 2 * interval}, lease, interval)
		}
		if want := 1.25 * 17 / 16 * reports; float64(sum) < want-1 || float64(sum) > want+1 {
			t.Errorf("%d reports added up to %d, want %.1f within one unit", reports, sum, want)
		}
	})
}
