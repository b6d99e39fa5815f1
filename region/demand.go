package region

import (
	"math"
	"time"

	"github.com/tollgate/tollgate"
)

// demandOf is the demand an entry reports after asking units in requests
// over elapsed, its last demand having been last: units per the limit's
// period for a rate, units over lease for a window. The Home sums the
// demands of a region's processes and splits the limit by them.
//
// A process of a region that runs many sees few requests an interval, and
// their count swings by about its square root from one interval to the
// next as they arrive: a demand that followed each swing would take a
// smaller share at every dip (at once) and get the larger back only once
// the others gave it (an interval or two later), and its region would get
// less than it asks. So the demand moves a part (the interval over the
// lease) of the way to what was asked, unless what was asked is three
// deviations of such noise away from what the last demand expected: then
// the demand moved, and follows at once.
func (sh *shared) demandOf(last float64, units, requests int64, elapsed, lease time.Duration) float64 {
	elapsed = max(elapsed, time.Millisecond)
	per := sh.limit.Period
	if sh.window {
		per = lease
	}
	rate := float64(units) * float64(per) / float64(elapsed)
	if last <= 0 {
		return min(rate, tollgate.MaxRate)
	}
	cost := 1.0 // units a request
	if requests > 0 {
		cost = float64(units) / float64(requests)
	}
	expected := last * float64(elapsed) / float64(per) // units
	if math.Abs(float64(units)-expected) > 3*math.Sqrt(expected*cost)+cost {
		return min(rate, tollgate.MaxRate)
	}
	return last + min(1, float64(elapsed)/float64(lease))*(rate-last)
}
