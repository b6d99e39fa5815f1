// Package algo is the Go mirror of the Lua scripts in package lua: the four
// algorithms as pure functions on the same integer state, giving the same
// answers bit for bit. The Memory store runs them; a differential test in
// package lua runs them beside the scripts on a real Redis.
//
// Units are those of the scripts: time in microseconds, quantities in whole
// units. The scripts compute in doubles, exactly: every product of a count
// and a duration goes through lua/arith.lua's mulfloor and mulceil, which
// return the exact floor and ceiling of a*b/d for the sizes
// tollgate.Limit.Validate admits. Here the same quotients come from 128-bit
// integer arithmetic (math/bits), so the two compute the same numbers.
package algo

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/tollgate/tollgate"
)

// Params are a decision's inputs: ARGV[1] to ARGV[4] of the scripts.
type Params struct {
	// Rate is the number of units admitted per Period.
	Rate int64
	// Period is in microseconds; for a calendar FixedWindow it is the
	// negated tollgate.Calendar: -1 Day, -2 Week, -3 Month, -4 Year.
	Period int64
	// Capacity is the burst for TokenBucket and GCRA, Rate for the windows.
	Capacity int64
	// Cost is the units asked for. 0 only reads: the Result reports the
	// current Remaining and ResetAfter and the State is returned unchanged.
	Cost int64
}

// ParamsOf converts a normalized request into Params: what the stores send
// to the scripts and give the mirror.
func ParamsOf(req tollgate.Request) Params {
	period := req.Limit.Period.Microseconds()
	if req.Limit.Calendar != tollgate.NoCalendar {
		period = -int64(req.Limit.Calendar)
	}
	return Params{
		Rate:     req.Limit.Rate,
		Period:   period,
		Capacity: req.Limit.Capacity(),
		Cost:     req.Cost,
	}
}

// State is what one identity keeps under one algorithm: the decimal
// integers of the one string the script stores at its key, in order, or
// nothing when the key is absent (Format writes the string).
//
//	TokenBucket    "n t"    A = whole tokens, B = refill credited up to, µs
//	GCRA           "t f"    A = TAT, whole µs, B = TAT's fraction of a µs in 1/Rate units
//	SlidingWindow  "w c p"  A = window number, B = count admitted in it, C = count in window A-1
//	FixedWindow    "w c"    A = window number, B = count admitted in it
//	               "w c k"  the same for a calendar window, C = k = -Params.Period
//
// A string a block cannot read (another layout) is absent for it, as the
// Lua patterns have it: a calendar window reads only states whose C is its
// kind, a period window only those whose C is 0.
type State struct {
	// Present is false for an absent key; then A, B and C are 0.
	Present bool
	A, B, C int64
}

// Format returns the string the script for a stores for s.
func Format(a tollgate.Algorithm, s State) string {
	if a == tollgate.SlidingWindow || a == tollgate.FixedWindow && s.C != 0 {
		return fmt.Sprintf("%d %d %d", s.A, s.B, s.C)
	}
	return fmt.Sprintf("%d %d", s.A, s.B)
}

// Result is a decision: the script's reply plus what it wrote.
type Result struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// Remaining, RetryAfter and ResetAfter are as in tollgate.Decision,
	// with durations in microseconds.
	Remaining, RetryAfter, ResetAfter int64
	// TTL is the PEXPIRE in milliseconds the script set on the state, or 0
	// when it did not write it.
	TTL int64
	// Debt is the units owed past empty (see Debt); only settlements and
	// overdraws report it.
	Debt int64
}

// Func decides a request of p at time now (µs) on state s, returning the
// state after the decision and the result. It writes the state only when it
// admits a cost above 0.
type Func func(s State, now int64, p Params) (State, Result)

// For returns the function for a, or nil for an unknown algorithm.
func For(a tollgate.Algorithm) Func {
	switch a {
	case tollgate.TokenBucket:
		return TokenBucket
	case tollgate.GCRA:
		return GCRA
	case tollgate.SlidingWindow:
		return SlidingWindow
	case tollgate.FixedWindow:
		return FixedWindow
	}
	return nil
}

// TTL returns the PEXPIRE, in milliseconds, the scripts set on state that
// stops mattering us microseconds from now: rounded up, plus one because the
// server's millisecond clock, from which PEXPIRE counts, may lag the TIME
// reading by up to a millisecond.
func TTL(us int64) int64 { return ceilDiv(us, 1000) + 1 }

// ceilDiv returns ⌈a/b⌉ for b > 0, like Lua's math.ceil(a / b) on exact
// integers.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}

// MulDiv returns q = ⌊a·b/d⌋ and r = a·b − q·d, exactly, for a, b ≥ 0 and
// d > 0 with q below 2^64, as lua/arith.lua's muldiv does for the sizes
// tollgate.Limit.Validate admits.
func MulDiv(a, b, d int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	uq, ur := bits.Div64(hi, lo, uint64(d))
	return int64(uq), int64(ur)
}

// mulFloor is lua/arith.lua's mulfloor: ⌊a·b/d⌋.
func mulFloor(a, b, d int64) int64 {
	q, _ := MulDiv(a, b, d)
	return q
}

// mulCeil is lua/arith.lua's mulceil: ⌈a·b/d⌉.
func mulCeil(a, b, d int64) int64 {
	q, r := MulDiv(a, b, d)
	if r > 0 {
		q++
	}
	return q
}

// TokenBucket mirrors lua/token_bucket.lua.
func TokenBucket(s State, now int64, p Params) (State, Result) {
	tokens, ts := p.Capacity, now
	if s.Present {
		tokens, ts = s.A, s.B
	}

	level, credited := p.Capacity, now
	elapsed := max(now-ts, 0)
	if tokens < p.Capacity && elapsed < mulCeil(p.Capacity-tokens, p.Period, p.Rate) {
		earned := mulFloor(elapsed, p.Rate, p.Period)
		level, credited = tokens+earned, ts+mulCeil(earned, p.Period, p.Rate)
	}

	var r Result
	if p.Cost <= level {
		r.Allowed, level = true, level-p.Cost
		if p.Cost > 0 {
			tokens, ts = level, credited
		}
	} else {
		r.RetryAfter = ts + mulCeil(p.Cost-tokens, p.Period, p.Rate) - now
	}
	if level < p.Capacity {
		r.ResetAfter = ts + mulCeil(p.Capacity-tokens, p.Period, p.Rate) - now
	}
	r.Remaining = level
	if r.Allowed && p.Cost > 0 {
		s = State{Present: true, A: tokens, B: ts}
		r.TTL = TTL(r.ResetAfter)
	}
	return s, r
}

// GCRA mirrors lua/gcra.lua: the lead TAT − now as whole µs and a fraction
// in 1/Rate units.
func GCRA(s State, now int64, p Params) (State, Result) {
	fq, fr := MulDiv(p.Capacity, p.Period, p.Rate) // full
	cq, cr := MulDiv(p.Cost, p.Period, p.Rate)     // what the cost adds
	lq, lr := fq-cq, fr-cr                         // the most lead the cost fits
	if lr < 0 {
		lq, lr = lq-1, lr+p.Rate
	}
	var ahead, frac int64
	if s.Present {
		ahead, frac = s.A-now, min(s.B, p.Rate-1)
		if ahead < 0 {
			ahead, frac = 0, 0
		}
	}
	var over int64
	if ahead > fq {
		over, ahead = ahead-fq, fq
	}

	var r Result
	if over == 0 && (ahead < lq || ahead == lq && frac <= lr) {
		r.Allowed, ahead, frac = true, ahead+cq, frac+cr
		if frac >= p.Rate {
			ahead, frac = ahead+1, frac-p.Rate
		}
	} else {
		r.RetryAfter = over + ahead - lq
		if frac > lr {
			r.RetryAfter++
		}
	}
	r.ResetAfter = over + ahead
	if frac > 0 {
		r.ResetAfter++
	}
	if r.Allowed && p.Cost > 0 {
		s = State{Present: true, A: now + ahead, B: frac}
		r.TTL = TTL(r.ResetAfter)
	}
	if over == 0 && (ahead < fq || ahead == fq && frac < fr) {
		q, rem := MulDiv(ahead, p.Rate, p.Period)
		r.Remaining = p.Capacity - q - ceilDiv(rem+frac, p.Period)
	}
	return s, r
}

// slidingCounts is the window holding now and the counts s keeps for it and
// for the window before, as stored (0 for a window s does not hold).
func slidingCounts(s State, now int64, p Params) (w, cur, prev int64) {
	w = now / p.Period
	if s.Present {
		switch s.A {
		case w:
			cur, prev = s.B, s.C
		case w - 1:
			prev = s.B
		}
	}
	return w, cur, prev
}

// SlidingWindow mirrors lua/sliding_window.lua.
func SlidingWindow(s State, now int64, p Params) (State, Result) {
	w, curN, prevN := slidingCounts(s, now, p)
	elapsed := now - w*p.Period
	prevStored := prevN
	curN, prevN = min(curN, 2*p.Rate), min(prevN, 2*p.Rate)
	var share int64
	if prevN > 0 {
		share = mulCeil(prevN, p.Period-elapsed, p.Period)
	}

	var r Result
	switch {
	case share+curN+p.Cost <= p.Rate:
		r.Allowed, curN = true, curN+p.Cost
	case curN <= p.Rate-p.Cost:
		r.RetryAfter = p.Period - elapsed - mulFloor(p.Rate-p.Cost-curN, p.Period, prevN)
	default:
		r.RetryAfter = p.Period - elapsed + mulCeil(curN-(p.Rate-p.Cost), p.Period, curN)
	}
	switch {
	case curN > 0:
		r.ResetAfter = 2*p.Period - elapsed
	case prevN > 0:
		r.ResetAfter = p.Period - elapsed
	}
	r.Remaining = max(p.Rate-curN-share, 0)
	if r.Allowed && p.Cost > 0 {
		s = State{Present: true, A: w, B: curN, C: prevStored}
		r.TTL = TTL(r.ResetAfter)
	}
	return s, r
}

// FixedWindow mirrors lua/fixed_window.lua.
func FixedWindow(s State, now int64, p Params) (State, Result) {
	var w, left, kind int64
	if p.Period > 0 {
		w = now / p.Period
		left = (w+1)*p.Period - now
	} else {
		kind = -p.Period
		var next int64
		w, next = CalendarWindow(tollgate.Calendar(kind), now)
		left = next - now
	}
	var count int64
	if s.Present && s.A == w && s.C == kind {
		count = s.B
	}

	var r Result
	if count+p.Cost <= p.Rate {
		r.Allowed, count = true, count+p.Cost
	} else {
		r.RetryAfter = left
	}
	if count > 0 {
		r.ResetAfter = left
	}
	r.Remaining = max(p.Rate-count, 0)
	if r.Allowed && p.Cost > 0 {
		s = State{Present: true, A: w, B: count, C: kind}
		r.TTL = TTL(left)
	}
	return s, r
}

const dayMicros = int64(24 * time.Hour / time.Microsecond)

// CalendarWindow returns the number of the calendar window c (Day, Week,
// Month or Year, in UTC) holding now, µs since the Unix epoch, and the
// instant the next one starts, in µs. Window numbers are those the script
// stores: days since 1970-01-01, ISO weeks since the one starting Monday
// 1969-12-29, year×12 + month−1 (January 0), and the year.
func CalendarWindow(c tollgate.Calendar, now int64) (w, next int64) {
	day := now / dayMicros
	switch c {
	case tollgate.Day:
		return day, (day + 1) * dayMicros
	case tollgate.Week:
		w = (day + 3) / 7
		return w, (w*7 + 4) * dayMicros
	}
	y, m, _ := time.UnixMicro(now).UTC().Date()
	if c == tollgate.Month {
		return int64(y)*12 + int64(m) - 1, time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	}
	return int64(y), time.Date(y+1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
}
