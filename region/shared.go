package region

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// shared is how one global limit is split among the regions, decided once
// at New: whether it is a rate or a window, every region's floor, and the
// local limit a share stands for.
type shared struct {
	limit   tollgate.Limit // the global limit, normalized (see normalize)
	window  bool           // a FixedWindow: shared per window, not as a rate
	regions int
	floor   int64 // every region's floor, in the limit's units
}

// newShared checks that l can be shared among s.regions regions keeping
// the fraction floor each.
func newShared(l tollgate.Limit, s settings, floor float64) (*shared, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	sh := &shared{limit: normalize(l), window: l.Algorithm == tollgate.FixedWindow, regions: s.regions}
	if l.Algorithm == tollgate.SlidingWindow {
		return nil, errors.New("a sliding window is not shared among regions: use a token bucket or GCRA (a rate) or a fixed window")
	}
	if l.Rate < int64(s.regions) {
		return nil, fmt.Errorf("the global limit %d is below the number of regions %d: each region needs at least one unit of floor", l.Rate, s.regions)
	}
	sh.floor = max(1, int64(math.Floor(float64(l.Rate)*floor)))
	if sh.floor*int64(s.regions) > l.Rate {
		return nil, fmt.Errorf("%d regions with a floor of %d each would hold %d, more than the limit %d", s.regions, sh.floor, sh.floor*int64(s.regions), l.Rate)
	}
	if !sh.window && sh.burst(sh.floor) < 1 {
		return nil, fmt.Errorf("a floor of %d/%s gives a region a burst of %d×%d/%d < 1: raise the burst or the floor", sh.floor, l.Period, sh.limit.Burst, sh.floor, l.Rate)
	}
	if sh.window {
		if n := windowLength(l); n < 2*s.rebalance || n < 4*s.skew {
			return nil, fmt.Errorf("a window of %s is shorter than two rebalance intervals (%s) or four clock skews (%s)", n, s.rebalance, s.skew)
		}
	}
	return sh, nil
}

// normalize gives l the form the region matches requests by: the burst of
// a rate spelled out, none for a window.
func normalize(l tollgate.Limit) tollgate.Limit {
	if l.Algorithm == tollgate.FixedWindow || l.Algorithm == tollgate.SlidingWindow {
		l.Burst = 0
	} else {
		l.Burst = l.Capacity()
	}
	return l
}

// burst is the part of the global burst a share of the rate holds: the
// same fraction, rounded down, so that the bursts held add up to at most
// the global one.
func (sh *shared) burst(share int64) int64 {
	hi, lo := bits.Mul64(uint64(sh.limit.Burst), uint64(share))
	q, _ := bits.Div64(hi, lo, uint64(sh.limit.Rate))
	return int64(q)
}

// local is the limit this region decides under when it holds share: a
// token bucket of that rate and its part of the burst (a GCRA limit too:
// a token bucket's state never gains from a change of its rate, see
// Region.raise), or a window of share units. ok is false when the share
// holds no burst at all.
func (sh *shared) local(share int64) (l tollgate.Limit, ok bool) {
	if sh.window {
		return tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: share, Period: sh.limit.Period, Calendar: sh.limit.Calendar}, true
	}
	b := sh.burst(share)
	return tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: share, Period: sh.limit.Period, Burst: b}, b >= 1
}

// windowLength is a window's length: a calendar unit's now.
func windowLength(l tollgate.Limit) time.Duration {
	if l.Calendar != tollgate.NoCalendar {
		return l.Calendar.Length(time.Now())
	}
	return l.Period
}

// windowAt returns the number of the window holding now (as the scripts
// number them) and its bounds.
func (sh *shared) windowAt(now time.Time) (w int64, start, end time.Time) {
	us := now.UnixMicro()
	if sh.limit.Calendar == tollgate.NoCalendar {
		p := sh.limit.Period.Microseconds()
		w = us / p
		return w, time.UnixMicro(w * p), time.UnixMicro((w + 1) * p)
	}
	w, next := algo.CalendarWindow(sh.limit.Calendar, us)
	end = time.UnixMicro(next)
	u := now.UTC()
	switch sh.limit.Calendar {
	case tollgate.Day:
		start = time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	case tollgate.Week:
		start = end.AddDate(0, 0, -7)
	case tollgate.Month:
		start = time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
	default:
		start = time.Date(u.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return w, start, end
}
