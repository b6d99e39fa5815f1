package region

import (
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fairshare"
)

// demandOf turns the units asked over elapsed into a demand: units per the
// limit's period for a rate, units over lease for a window.
func (sh *shared) demandOf(asked int64, elapsed, lease time.Duration) int64 {
	elapsed = max(elapsed, time.Millisecond)
	per := sh.limit.Period
	if sh.window {
		per = lease
	}
	d := float64(asked) * float64(per) / float64(elapsed)
	return int64(min(d, tollgate.MaxRate))
}

// rateWant is the share of a rate a region asks for: its floor, plus its
// max-min fair share of what the floors leave of the rate, by what the
// regions ask beyond their floors (demand, and the others' last reports).
// Until the Home has answered for a lease (heard false), the region does
// not know who else asks (a region reports first within an interval, or
// was cut off): it counts every other region it has not heard of as
// asking an equal split, so that a starting region takes no more than
// that unless it asks less.
func (sh *shared) rateWant(demand int64, others []Holding, heard bool) int64 {
	pool := sh.limit.Rate - int64(sh.regions)*sh.floor
	beyond := make([]int64, 0, sh.regions)
	for _, o := range others {
		beyond = append(beyond, max(0, o.Demand-sh.floor))
	}
	for range sh.unknown(len(others), heard) {
		beyond = append(beyond, pool/int64(sh.regions))
	}
	return sh.floor + fairshare.Of(pool, beyond, max(0, demand-sh.floor))
}

// unknown is how many other regions a want counts as asking as much as
// the region itself or an equal split: those not heard of, until the Home
// has answered for a lease; none after (a region without a holding then
// asks nothing: it left, or its lease ended).
func (sh *shared) unknown(known int, heard bool) int {
	if heard {
		return 0
	}
	return max(0, sh.regions-1-known)
}

// windowWant is the share of window a region asks for, having used used
// of it: what it used (at least its floor), plus its max-min fair share,
// by the demands over the next lease, of what is left in the window once
// every region's use (at least its floor) is counted, at most twice what
// the regions ask, so that a share held by a region cut off is bounded by
// its demand.
//
// Until the Home has answered for a lease, every other region not heard
// of counts as asking what this one asks.
func (sh *shared) windowWant(window, demand, used int64, others []Holding, heard bool) int64 {
	base := max(sh.floor, used)
	taken := base + int64(sh.regions-1-len(others))*sh.floor
	asks, total := make([]int64, 0, sh.regions), demand
	for range sh.unknown(len(others), heard) {
		asks = append(asks, demand)
		total += demand
	}
	for _, o := range others {
		u := int64(0)
		if o.Window == window {
			u = o.Used
		}
		taken += max(sh.floor, u)
		asks = append(asks, o.Demand)
		total += o.Demand
	}
	pool := min(max(0, sh.limit.Rate-taken), 2*total)
	return min(sh.limit.Rate, base+fairshare.Of(pool, asks, demand))
}
