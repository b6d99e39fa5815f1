package region

import (
	"time"

	"github.com/tollgate/tollgate"
)

// demandOf turns the units asked over elapsed into a demand: units per the
// limit's period for a rate, units over lease for a window. The Home sums
// the demands of a region's processes and splits the limit by them.
func (sh *shared) demandOf(asked int64, elapsed, lease time.Duration) int64 {
	elapsed = max(elapsed, time.Millisecond)
	per := sh.limit.Period
	if sh.window {
		per = lease
	}
	d := float64(asked) * float64(per) / float64(elapsed)
	return int64(min(d, tollgate.MaxRate))
}
