package region

import (
	"math"
	"time"

	"github.com/tollgate/tollgate"
)

// maxSamples bounds the intervals a demand is measured over.
const maxSamples = 16

// sample is what one entry was asked over one interval.
type sample struct {
	units, requests int64
	elapsed         time.Duration
}

// demand is an entry's demand as its process measures it: what it was
// asked over its last intervals, as many as a lease holds (the
// coordinator's alone).
//
// A process of a region that runs many sees few requests an interval, and
// their count swings by about its square root from one interval to the
// next: a demand that followed each swing would take a smaller share at
// every dip (at once) and get the larger back only once the other regions
// gave it (an interval or two later), and its region would get less than
// it asks. Over a lease the swings even out, and a request counts once
// (the Home sums its processes' demands). A move is followed at once: when
// the last interval asked three deviations of such noise (and two
// requests) away from what the lease before it asked, the demand is the
// last interval's alone. An entry starts with a lease of nothing asked: it
// is made by a request, and made again by one after it was idle.
type demand struct {
	ring [maxSamples]sample
	n    int // samples held, the latest at ring[(next-1) % len]
	next int
	size int // the samples a lease holds
	// carry is what the reports rounded away so far.
	carry float64
}

// add records an interval and returns the demand: units per the limit's
// period for a rate, units over lease for a window.
func (d *demand) add(sh *shared, s sample, lease, interval time.Duration) int64 {
	d.size = min(max(d.size, 1), maxSamples)
	s.elapsed = max(s.elapsed, time.Millisecond)
	if d.new() {
		// Nothing was asked before (the entry is made by a request, or
		// again after it was idle): a process that sees a request now and
		// then would otherwise report a burst at each.
		for range d.size - 1 {
			d.ring[d.next] = sample{elapsed: interval}
			d.next, d.n = d.next+1, d.n+1
		}
	}
	if d.n > 0 {
		before := d.sum()
		expected := float64(before.units) * float64(s.elapsed) / float64(before.elapsed)
		cost := 1.0 // units a request
		if s.requests > 0 {
			cost = float64(s.units) / float64(s.requests)
		} else if before.requests > 0 {
			cost = float64(before.units) / float64(before.requests)
		}
		if math.Abs(float64(s.units)-expected) > 3*math.Sqrt(max(expected, cost)*cost)+2*cost {
			d.n = 0 // a move
		}
	}
	d.ring[d.next] = s
	d.next = (d.next + 1) % d.size
	d.n = min(d.n+1, d.size)
	all := d.sum()
	per := sh.limit.Period
	if sh.window {
		per = lease
	}
	// The demand is reported with a sixteenth more (headroom: a share that
	// followed what was asked exactly would fall short at each swing up,
	// which it follows only once the other regions gave back), in whole
	// units: what the rounding left out is carried to the next report, so
	// that a process asking 1.25 a second reports 1 and 2 in turn, and the
	// region's processes summed are not off by half a unit each.
	rate := min(float64(all.units)*float64(per)/float64(all.elapsed)*17/16, tollgate.MaxRate)
	whole := math.Floor(rate + d.carry + 0.5)
	d.carry += rate - whole
	return int64(max(0, whole))
}

// new reports whether no interval was recorded yet.
func (d *demand) new() bool { return d.n == 0 && d.next == 0 && d.ring[0].elapsed == 0 }

// sum adds up the samples held.
func (d *demand) sum() sample {
	var all sample
	for i := 1; i <= d.n; i++ {
		s := d.ring[(d.next-i+d.size)%d.size]
		all.units, all.requests, all.elapsed = all.units+s.units, all.requests+s.requests, all.elapsed+s.elapsed
	}
	return all
}
