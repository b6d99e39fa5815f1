// Package algo is the Go mirror of the Lua scripts in package lua: the four
// algorithms as pure functions on the same integer state, giving the same
// answers bit for bit. The Memory store runs them; tests compare them with
// the scripts on a real Redis.
//
// Units are those of the scripts: time in microseconds, quantities in whole
// units. The scripts compute in doubles but only on integers below 2^53
// (tollgate.Limit.Validate bounds them), where floor and ceil of a quotient
// are the exact integer quotients; so plain int64 arithmetic here is the same
// computation.
package algo

import "github.com/tollgate/tollgate"

// Params are a decision's inputs: ARGV[1] to ARGV[4] of the scripts.
type Params struct {
	// Rate is the number of units admitted per Period.
	Rate int64
	// Period is in microseconds.
	Period int64
	// Capacity is the burst for TokenBucket and GCRA, Rate for the windows.
	Capacity int64
	// Cost is the units asked for. 0 only reads: the Result reports the
	// current Remaining and ResetAfter and the State is returned unchanged.
	Cost int64
}

// ParamsOf converts a normalized request into Params.
func ParamsOf(req tollgate.Request) Params {
	return Params{
		Rate:     req.Limit.Rate,
		Period:   req.Limit.Period.Microseconds(),
		Capacity: req.Limit.Capacity(),
		Cost:     req.Cost,
	}
}

// Slot is one piece of an identity's state: two integers, or nothing when
// the identity has none. The scripts keep the same integers as one short
// string per identity (lua/*.lua says how); the sliding window's two slots,
// the current and the previous window, share that one string.
//
//	TokenBucket    A = whole tokens (n), B = refill credited up to, µs (t)
//	GCRA           A = TAT, whole µs (t), B = TAT's fraction of a µs in 1/Rate units (f)
//	SlidingWindow  A = window number (w), B = count admitted in it (c)
//	FixedWindow    A = window number (w), B = count admitted in it (c)
type Slot struct {
	// Present is false for an absent key; then A and B are 0.
	Present bool
	A, B    int64
}

// State is everything one identity keeps under one algorithm (only the
// sliding window uses the second slot).
type State [2]Slot

// Result is a decision: the script's reply plus what it wrote.
type Result struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// Remaining, RetryAfter and ResetAfter are as in tollgate.Decision,
	// with durations in microseconds.
	Remaining, RetryAfter, ResetAfter int64
	// TTL is, per slot, the PEXPIRE in milliseconds the script set on it,
	// or 0 when it did not write that slot.
	TTL [2]int64
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
// integers (a is negative only when a read-only call is denied, whose
// RetryAfter nobody uses).
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}

// TokenBucket mirrors lua/token_bucket.lua.
func TokenBucket(s State, now int64, p Params) (State, Result) {
	tokens, ts := p.Capacity, now
	if s[0].Present {
		tokens, ts = s[0].A, s[0].B
	}

	level, credited := p.Capacity, now
	elapsed := max(now-ts, 0)
	if tokens < p.Capacity && elapsed < ceilDiv((p.Capacity-tokens)*p.Period, p.Rate) {
		earned := elapsed * p.Rate / p.Period
		level, credited = tokens+earned, ts+ceilDiv(earned*p.Period, p.Rate)
	}

	var r Result
	if p.Cost <= level {
		r.Allowed, level = true, level-p.Cost
		if p.Cost > 0 {
			tokens, ts = level, credited
		}
	} else {
		r.RetryAfter = ts + ceilDiv((p.Cost-tokens)*p.Period, p.Rate) - now
	}
	if level < p.Capacity {
		r.ResetAfter = ts + ceilDiv((p.Capacity-tokens)*p.Period, p.Rate) - now
	}
	r.Remaining = level
	if r.Allowed && p.Cost > 0 {
		s[0] = Slot{Present: true, A: tokens, B: ts}
		r.TTL[0] = TTL(r.ResetAfter)
	}
	return s, r
}

// GCRA mirrors lua/gcra.lua. The backlog is (TAT − now) × Rate.
func GCRA(s State, now int64, p Params) (State, Result) {
	full := p.Capacity * p.Period
	var ahead, frac int64
	if s[0].Present {
		ahead, frac = s[0].A-now, min(s[0].B, p.Rate-1)
		if ahead < 0 {
			ahead, frac = 0, 0
		}
	}
	var over int64
	if most := full / p.Rate; ahead > most {
		over, ahead = ahead-most, most
	}
	backlog := ahead*p.Rate + frac

	var r Result
	if over == 0 && backlog <= (p.Capacity-p.Cost)*p.Period {
		r.Allowed, backlog = true, backlog+p.Cost*p.Period
	} else {
		r.RetryAfter = over + ceilDiv(backlog-(p.Capacity-p.Cost)*p.Period, p.Rate)
	}
	r.ResetAfter = over + ceilDiv(backlog, p.Rate)
	if r.Allowed && p.Cost > 0 {
		s[0] = Slot{Present: true, A: now + backlog/p.Rate, B: backlog % p.Rate}
		r.TTL[0] = TTL(r.ResetAfter)
	}
	if over == 0 && backlog < full {
		r.Remaining = (full - backlog) / p.Period
	}
	return s, r
}

// SlidingWindow mirrors lua/sliding_window.lua. Slot w%2 holds window w.
func SlidingWindow(s State, now int64, p Params) (State, Result) {
	w := now / p.Period
	elapsed := now - w*p.Period
	cur, prev := w%2, 1-w%2
	var curN, prevN int64
	if s[cur].Present && s[cur].A == w {
		curN = min(s[cur].B, p.Rate)
	}
	if s[prev].Present && s[prev].A == w-1 {
		prevN = min(s[prev].B, p.Rate)
	}
	used := prevN*(p.Period-elapsed) + curN*p.Period

	var r Result
	switch {
	case used <= (p.Rate-p.Cost)*p.Period:
		r.Allowed, curN, used = true, curN+p.Cost, used+p.Cost*p.Period
	case curN <= p.Rate-p.Cost:
		r.RetryAfter = ceilDiv(used-(p.Rate-p.Cost)*p.Period, prevN)
	default:
		r.RetryAfter = p.Period - elapsed + ceilDiv((curN-(p.Rate-p.Cost))*p.Period, curN)
	}
	switch {
	case curN > 0:
		r.ResetAfter = 2*p.Period - elapsed
	case prevN > 0:
		r.ResetAfter = p.Period - elapsed
	}
	if used < p.Rate*p.Period {
		r.Remaining = (p.Rate*p.Period - used) / p.Period
	}
	if r.Allowed && p.Cost > 0 {
		s[cur] = Slot{Present: true, A: w, B: curN}
		r.TTL[cur] = TTL(r.ResetAfter)
	}
	return s, r
}

// FixedWindow mirrors lua/fixed_window.lua.
func FixedWindow(s State, now int64, p Params) (State, Result) {
	w := now / p.Period
	left := (w+1)*p.Period - now
	var count int64
	if s[0].Present && s[0].A == w {
		count = s[0].B
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
		s[0] = Slot{Present: true, A: w, B: count}
		r.TTL[0] = TTL(left)
	}
	return s, r
}
