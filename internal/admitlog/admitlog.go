// Package admitlog is test support for the regions sharing a global
// limit (package region's tests and bench's): a log of what each region
// admitted and when, the units it admitted over a time, and the worst
// span of a given length, to hold against what one token bucket of the
// global limit admits.
package admitlog

import (
	"sort"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
)

// Log records admissions; it is safe for concurrent use.
type Log struct {
	mu  sync.Mutex
	all []entry
}

// entry is one admitted request: when, where, how many units.
type entry struct {
	at     time.Time
	region int
	units  int64
}

// Add records that region admitted units at at.
func (l *Log) Add(region int, at time.Time, units int64) {
	l.mu.Lock()
	l.all = append(l.all, entry{at: at, region: region, units: units})
	l.mu.Unlock()
}

// Units sums what region (-1: every region) admitted in [from, to).
func (l *Log) Units(region int, from, to time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := int64(0)
	for _, a := range l.all {
		if (region < 0 || a.region == region) && !a.at.Before(from) && a.at.Before(to) {
			n += a.units
		}
	}
	return n
}

// Rate is Units per second of [from, to).
func (l *Log) Rate(region int, from, to time.Time) float64 {
	return float64(l.Units(region, from, to)) / to.Sub(from).Seconds()
}

// Span is the span of one length in which the regions admitted the most.
type Span struct {
	Length time.Duration
	// Units admitted in it, by all the regions; ByRegion by each.
	Units    int64
	ByRegion map[int]int64
	// Ends is when it ends; Allowed is what one token bucket of the
	// limit admits over Length: its capacity and the rate over Length.
	Ends    time.Time
	Allowed int64
}

// Worst returns, for the length, the span (ending at an admission) in
// which the regions together admitted the most, and what a token bucket
// of limit admits over it.
func (l *Log) Worst(limit tollgate.Limit, length time.Duration) Span {
	l.mu.Lock()
	adm := append([]entry(nil), l.all...)
	l.mu.Unlock()
	sort.Slice(adm, func(i, j int) bool { return adm[i].at.Before(adm[j].at) })
	s := Span{Length: length, Allowed: limit.Capacity() + limit.Rate*int64(length)/int64(limit.Period), ByRegion: map[int]int64{}}
	lo, sum, at := 0, int64(0), -1
	for hi := range adm {
		sum += adm[hi].units
		for !adm[lo].at.After(adm[hi].at.Add(-length)) {
			sum -= adm[lo].units
			lo++
		}
		if sum > s.Units {
			s.Units, at = sum, hi
		}
	}
	if at >= 0 {
		s.Ends = adm[at].at
		for _, a := range adm {
			if a.at.After(s.Ends.Add(-length)) && !a.at.After(s.Ends) {
				s.ByRegion[a.region] += a.units
			}
		}
	}
	return s
}
