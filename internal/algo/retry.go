package algo

import (
	"math/bits"

	"github.com/tollgate/tollgate"
)

// RetryAfterFor returns the RetryAfter (µs) algorithm a answers a cost of
// cost ≥ p.Cost on the state on which p was denied with retryAfter and
// resetAfter (µs), and whether the denial alone tells it; when it does not,
// only the state does. It does for the same cost, for the whole capacity
// (resetAfter), for a fixed window whatever the cost (the window's end), for
// a token bucket or GCRA when cost differs from p.Cost or from the capacity
// by a whole number of microseconds of refill (the wait is
// ⌈x + cost·Period/Rate⌉ for an x the state fixes), and for a sliding window
// in the two cases slidingRetryAfter describes.
func RetryAfterFor(a tollgate.Algorithm, p Params, retryAfter, resetAfter, cost int64) (int64, bool) {
	switch {
	case cost == p.Cost:
		return retryAfter, true
	case cost == p.Capacity:
		return resetAfter, true
	case a == tollgate.FixedWindow:
		return retryAfter, true
	case a == tollgate.TokenBucket || a == tollgate.GCRA:
		if m, r := MulDiv(cost-p.Cost, p.Period, p.Rate); r == 0 {
			return retryAfter + m, true
		}
		if m, r := MulDiv(p.Capacity-cost, p.Period, p.Rate); r == 0 {
			return resetAfter - m, true
		}
	case a == tollgate.SlidingWindow:
		return slidingRetryAfter(p, retryAfter, resetAfter, cost)
	}
	return 0, false
}

// slidingRetryAfter is RetryAfterFor for a sliding window (SlidingWindow),
// in the two cases where one unknown count decides every cost's wait. With
// P the period and e the time into the current window when p was denied:
//
//   - nothing counted in the current window (resetAfter = P − e ≤ P): a cost
//     c waits P − e − ⌊(Rate − c)·P/x⌋, x the previous window's count;
//   - p.Cost fits only in the next window (retryAfter > P − e, so
//     resetAfter = 2P − e): c waits 2P − e − ⌊(Rate − c)·P/x⌋, x the current
//     window's count, for every larger cost too.
//
// Both read resetAfter − ⌊(Rate − c)·P/x⌋. The denied cost's wait gives
// m = ⌊(Rate − p.Cost)·P/x⌋, so x lies in an interval; the wait for cost is
// known when ⌊(Rate − cost)·P/x⌋, which only falls as x grows, is the same
// at both ends of it. Otherwise (the current window's count fits, and the
// previous one's decides too) it is not known.
func slidingRetryAfter(p Params, retryAfter, resetAfter, cost int64) (int64, bool) {
	if resetAfter > p.Period && retryAfter <= resetAfter-p.Period {
		return 0, false
	}
	a, b := p.Rate-p.Cost, p.Rate-cost
	m := resetAfter - retryAfter
	lo := floorAtMost(a, p.Period, m+1, p.Rate) + 1
	hi := p.Rate
	if m > 0 {
		hi = floorAtMost(a, p.Period, m, p.Rate)
	}
	if lo > hi {
		return 0, false
	}
	wait := floorAtMost(b, p.Period, lo, m)
	if wait != floorAtMost(b, p.Period, hi, m) {
		return 0, false
	}
	return resetAfter - wait, true
}

// floorAtMost returns min(⌊a·b/d⌋, limit) for a, b ≥ 0 and d > 0, whatever
// the size of the quotient.
func floorAtMost(a, b, d, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) {
		return limit // the quotient is 2^64 or more
	}
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(min(q, uint64(limit)))
}
