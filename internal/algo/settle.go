package algo

import (
	"math/bits"

	"github.com/tollgate/tollgate"
)

// Write says what a settlement does to the stored state.
type Write uint8

const (
	// Keep leaves the state as it is.
	Keep Write = iota
	// Put stores the new state, for Result.TTL milliseconds.
	Put
	// Delete removes the state: the identity is idle (a full bucket).
	Delete
)

// MaxDebtTime bounds, in µs, how far a bucket's debt reaches past now: 2^50
// µs, about 35 years of refill. A larger debt is forgiven. The bound keeps
// every quotient the scripts form below 2^52, and every instant below 2^53
// µs (the year 2255) until the year 2100 even with a refill of MaxRefill.
const MaxDebtTime = 1 << 50

// debtTime is ⌈units·period/rate⌉ µs, the refill units take, at most
// MaxDebtTime.
func debtTime(units, period, rate int64) int64 {
	hi, lo := bits.Mul64(uint64(units), uint64(period))
	if hi >= uint64(rate) {
		return MaxDebtTime // the quotient does not fit 64 bits
	}
	q, r := bits.Div64(hi, lo, uint64(rate))
	if r > 0 {
		q++
	}
	return int64(min(q, MaxDebtTime))
}

// Admission is the debit a settlement changes: Reserved units debited at At
// (µs, the store's clock), after which the bucket was Reset µs from full
// (the admission's ResetAfter; windows do not read it). At 0 means unknown
// (a refund of hits whose admission nobody kept): the units count as
// debited at now from an empty bucket, so that a bucket gets them back up
// to its capacity and a window in the current window. Settled, when not
// negative, is the final cost an earlier settlement of the same request
// made: only the difference from it applies.
type Admission struct {
	Reserved, At, Reset int64
	Settled             int64
}

// Settle mirrors lua/settle.lua: it makes final the cost of adm, a debit of
// adm.Reserved units on state s, at now under the limit p (p.Cost is what a
// later request asks, for the answer). A smaller final cost gives the
// difference back, never creating quota: a bucket not above its capacity,
// less the refill it could have lost had it been debited final units
// instead (see headroom); a window only while the window of adm.At is
// stored. A larger one debits the rest past empty: a bucket's refill is
// then credited from a time after now (its debt, at most maxDebtTime), a
// window counts past its rate (a sliding window at most one rate past it).
// It returns the new state, what to do with it, and its answer (see
// answer).
func Settle(alg tollgate.Algorithm, s State, now int64, p Params, adm Admission, final int64) (State, Write, Result) {
	bucket := alg == tollgate.TokenBucket || alg == tollgate.GCRA // adm.Reset matters
	if adm.At == 0 {
		adm.At = now
		if bucket {
			adm.Reset = mulCeil(p.Capacity, p.Period, p.Rate)
		}
	}
	if adm.Settled >= 0 {
		// As if the admission had debited Settled: its bucket that much
		// further from full, or nearer (rounded nearer).
		if d := adm.Settled - adm.Reserved; bucket && d > 0 {
			adm.Reset += debtTime(d, p.Period, p.Rate) - 1
		} else if bucket && d < 0 {
			adm.Reset -= debtTime(-d, p.Period, p.Rate)
		}
		adm.Reserved = adm.Settled
	}
	var st State
	var w Write
	switch delta := final - adm.Reserved; {
	case delta > 0:
		st, w = debit(alg, s, now, p, delta)
	case delta < 0:
		st, w = giveBack(alg, s, now, p, adm, -delta)
	default:
		st = s
	}
	if w == Delete {
		st = State{}
	}
	return st, w, answer(alg, st, now, p, w)
}

// answer is what a settlement answers: whether a request of p.Cost would
// be admitted now and its wait, with the units available now (no debit),
// the time to full, and the TTL of a Put.
func answer(alg tollgate.Algorithm, st State, now int64, p Params, w Write) Result {
	_, r := For(alg)(st, now, p)
	peek := p
	peek.Cost = 0
	_, now0 := For(alg)(st, now, peek)
	r.Remaining, r.ResetAfter, r.TTL = now0.Remaining, now0.ResetAfter, 0
	r.Debt = Debt(alg, st, now, p)
	if w == Put {
		r.TTL = TTL(r.ResetAfter)
		if alg == tollgate.FixedWindow {
			r.TTL = TTL(windowLeft(now, p))
		}
	}
	return r
}

// Overdraw mirrors lua/settle.lua's overdraw: a request of p.Cost (up to
// tollgate.MaxRate) debited whether or not it fits. Result.Allowed reports
// whether it fitted; the rest of the Result is what the same request, or
// one of the whole capacity when it is larger, would get after the debit.
func Overdraw(alg tollgate.Algorithm, s State, now int64, p Params) (State, Write, Result) {
	if p.Cost <= p.Capacity {
		if st, r := For(alg)(s, now, p); r.Allowed {
			return st, Put, r
		}
	}
	st, w := debit(alg, s, now, p, p.Cost)
	q := p
	q.Cost = min(p.Cost, p.Capacity)
	r := answer(alg, st, now, q, w)
	r.Allowed = false
	return st, w, r
}

// Debt mirrors lua's debt blocks: the units s owes past empty at now, 0
// when it owes none. A bucket owes the units its refill must pay before
// crediting any (a token bucket whose refill is credited from after now
// with no token kept, a GCRA lead past the capacity); a window, what it
// counted past its rate (a sliding window, in its estimate).
func Debt(alg tollgate.Algorithm, s State, now int64, p Params) int64 {
	if !s.Present {
		return 0
	}
	switch alg {
	case tollgate.TokenBucket:
		if s.A == 0 && s.B > now {
			return mulCeil(s.B-now, p.Rate, p.Period)
		}
	case tollgate.GCRA:
		if s.A > now {
			q, r := MulDiv(s.A-now, p.Rate, p.Period)
			if r+min(s.B, p.Rate-1) > 0 {
				q += ceilDiv(r+min(s.B, p.Rate-1), p.Period)
			}
			return max(q-p.Capacity, 0)
		}
	case tollgate.SlidingWindow:
		w, cur, prev := slidingCounts(s, now, p)
		cur, prev = min(cur, 2*p.Rate), min(prev, 2*p.Rate)
		var share int64
		if prev > 0 {
			share = mulCeil(prev, p.Period-(now-w*p.Period), p.Period)
		}
		return max(cur+share-p.Rate, 0)
	case tollgate.FixedWindow:
		w, kind := fixedWindow(now, p)
		if s.A == w && s.C == kind {
			return max(s.B-p.Rate, 0)
		}
	}
	return 0
}

// windowLeft is the µs until the fixed window holding now ends.
func windowLeft(now int64, p Params) int64 {
	if p.Period > 0 {
		return (now/p.Period+1)*p.Period - now
	}
	_, next := CalendarWindow(tollgate.Calendar(-p.Period), now)
	return next - now
}

// debit takes d units from s at now, past empty.
func debit(alg tollgate.Algorithm, s State, now int64, p Params, d int64) (State, Write) {
	switch alg {
	case tollgate.TokenBucket:
		level, credited := bucketLevel(s, now, p)
		if d <= level {
			return State{Present: true, A: level - d, B: credited}, Put
		}
		// The rest is owed: refill is credited only from when it is paid.
		owed := debtTime(d-level, p.Period, p.Rate)
		return State{Present: true, A: 0, B: min(credited+owed, now+MaxDebtTime)}, Put
	case tollgate.GCRA:
		t, f := now, int64(0)
		if s.Present && s.A >= now {
			t, f = s.A, min(s.B, p.Rate-1)
		}
		limit := now + MaxDebtTime
		if float64(d)*float64(p.Period)/float64(p.Rate) > 1.5*MaxDebtTime {
			// As lua/settle_gcra.lua estimates it, in doubles: far past the
			// bound, so that no exact product is formed out of range.
			return State{Present: true, A: limit, B: 0}, Put
		}
		q, r := MulDiv(d, p.Period, p.Rate)
		t, f = t+q, f+r
		if f >= p.Rate {
			t, f = t+1, f-p.Rate
		}
		if t > limit {
			t, f = limit, 0
		}
		return State{Present: true, A: t, B: f}, Put
	case tollgate.SlidingWindow:
		w, cur, prev := slidingCounts(s, now, p)
		return State{Present: true, A: w, B: min(cur+d, 2*p.Rate), C: prev}, Put
	}
	// FixedWindow
	w, kind := fixedWindow(now, p)
	var count int64
	if s.Present && s.A == w && s.C == kind {
		count = s.B
	}
	return State{Present: true, A: w, B: min(count+d, count+tollgate.MaxRate), C: kind}, Put
}

// giveBack returns g units of adm's debit to s at now.
func giveBack(alg tollgate.Algorithm, s State, now int64, p Params, adm Admission, g int64) (State, Write) {
	if !s.Present {
		return s, Keep // an idle identity holds nothing to give back
	}
	switch alg {
	case tollgate.TokenBucket:
		h := headroom(now, adm)
		if h <= 0 {
			return s, Keep
		}
		// g units, or h µs of refill when g take longer (estimated in
		// doubles first, as the script does, so that no exact product is
		// formed out of range). In debt, the debt shrinks by the time g
		// units take, rounded down.
		var st State
		switch {
		case beyond(g, p, h):
			st = State{Present: true, A: s.A, B: s.B - h}
		case s.B > now:
			st = State{Present: true, A: s.A, B: s.B - min(mulFloor(g, p.Period, p.Rate), h)}
		case mulCeil(g, p.Period, p.Rate) <= h:
			st = State{Present: true, A: s.A + g, B: s.B}
		default:
			st = State{Present: true, A: s.A, B: s.B - h}
		}
		if st.A >= p.Capacity || st.B <= now && now-st.B >= mulCeil(p.Capacity-st.A, p.Period, p.Rate) {
			return State{}, Delete // full
		}
		return st, Put
	case tollgate.GCRA:
		h := headroom(now, adm)
		if h <= 0 {
			return s, Keep
		}
		// g units of lead back, or h µs when g take longer.
		t, f := s.A-h, min(s.B, p.Rate-1)
		if !beyond(g, p, h) {
			if q, r := MulDiv(g, p.Period, p.Rate); q < h || q == h && r == 0 {
				t, f = s.A-q, f-r
				if f < 0 {
					t, f = t-1, f+p.Rate
				}
			}
		}
		if t < now || t == now && f == 0 {
			return State{}, Delete // back before now: idle
		}
		return State{Present: true, A: t, B: f}, Put
	case tollgate.SlidingWindow:
		debited := adm.At / p.Period
		switch s.A {
		case debited:
			return State{Present: true, A: s.A, B: max(s.B-g, 0), C: s.C}, Put
		case debited + 1:
			return State{Present: true, A: s.A, B: s.B, C: max(s.C-g, 0)}, Put
		}
		return s, Keep
	}
	// FixedWindow: only the window debited, while it is stored.
	w, kind := fixedWindow(adm.At, p)
	if s.A != w || s.C != kind {
		return s, Keep
	}
	return State{Present: true, A: w, B: max(s.B-g, 0), C: kind}, Put
}

// beyond reports whether g units take, by a double's estimate, clearly
// longer than lead µs: lua/settle_*.lua decide it the same way.
func beyond(g int64, p Params, lead int64) bool {
	return float64(g)*float64(p.Period)/float64(p.Rate) > 1.000001*float64(max(lead, 0))
}

// headroom is how long, in µs of refill, a bucket can be given back at now
// for adm: the time the admission left it from full, less the time since.
// Other calls since only took from it, so for that long it cannot have
// reached its capacity and lost refill to it; given more, it might have.
// (The admission's time to full is rounded up, by under 1µs.)
func headroom(now int64, adm Admission) int64 {
	return adm.Reset - max(now-adm.At, 0)
}

// bucketLevel is a token bucket's whole tokens at now and the µs its refill
// is credited up to, as TokenBucket computes them.
func bucketLevel(s State, now int64, p Params) (level, credited int64) {
	tokens, ts := p.Capacity, now
	if s.Present {
		tokens, ts = s.A, s.B
	}
	level, credited = p.Capacity, now
	elapsed := max(now-ts, 0)
	if tokens < p.Capacity && elapsed < mulCeil(p.Capacity-tokens, p.Period, p.Rate) {
		earned := mulFloor(elapsed, p.Rate, p.Period)
		level, credited = tokens+earned, ts+mulCeil(earned, p.Period, p.Rate)
	}
	return level, credited
}

// fixedWindow is the number and kind (0, or the calendar's) of the fixed
// window holding at.
func fixedWindow(at int64, p Params) (w, kind int64) {
	if p.Period > 0 {
		return at / p.Period, 0
	}
	w, _ = CalendarWindow(tollgate.Calendar(-p.Period), at)
	return w, -p.Period
}
