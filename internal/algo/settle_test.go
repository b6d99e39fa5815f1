package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

const sec = int64(time.Second / time.Microsecond)

// A 10/s bucket debited 1 and settled at 50 owes 40: the next call waits
// exactly the 4.1s that 41 units of refill take, and is admitted then.
func TestSettleDebtIsRepaidExactly(t *testing.T) {
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		p := Params{Rate: 10, Period: sec, Capacity: 10, Cost: 1}
		now := int64(1_700_000_000) * sec
		s, r := For(alg)(State{}, now, p)
		if !r.Allowed || r.Remaining != 9 {
			t.Fatalf("%s: first call %+v", alg, r)
		}
		s, w, r := Settle(alg, s, now, p, Admission{Reserved: 1, At: now, Reset: r.ResetAfter, Settled: -1}, 50)
		if w != Put || r.Allowed || r.Remaining != 0 || r.RetryAfter != 4_100_000 {
			t.Fatalf("%s: settled at 50: %v %+v, want denied, 0 left, retry 4.1s", alg, w, r)
		}
		if _, r := For(alg)(s, now+4_099_999, p); r.Allowed {
			t.Fatalf("%s: admitted 1µs before the debt is repaid", alg)
		}
		if _, r := For(alg)(s, now+4_100_000, p); !r.Allowed {
			t.Fatalf("%s: denied once the debt is repaid: %+v", alg, r)
		}
	}
}

// Giving back never leaves more than a bucket debited the final cost from
// the start would have, whatever happened in between; and far from full it
// leaves exactly that.
func TestSettleGivesBackNoMoreThanTheFinalDebit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		alg := []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA}[i%2]
		capacity := 1 + rng.Int64N(100)
		p := Params{Rate: 1 + rng.Int64N(50), Period: (1 + rng.Int64N(10)) * sec, Capacity: capacity}
		now := int64(1_700_000_000)*sec + rng.Int64N(sec)
		var a, b State
		// Some history before the admission.
		for range rng.IntN(4) {
			q := p
			q.Cost = 1 + rng.Int64N(capacity)
			a, _ = For(alg)(a, now, q)
			now += rng.Int64N(2 * sec)
		}
		b = a
		reserved := 1 + rng.Int64N(capacity)
		final := rng.Int64N(reserved + 1)
		q := p
		q.Cost = reserved
		a2, ra := For(alg)(a, now, q)
		if !ra.Allowed {
			continue
		}
		a = a2
		adm := Admission{Reserved: reserved, At: now, Reset: ra.ResetAfter, Settled: -1}
		q.Cost = final
		if final > 0 {
			b, _ = For(alg)(b, now, q)
		}
		// Other calls admitted meanwhile, in both histories.
		for range rng.IntN(4) {
			now += rng.Int64N(3 * sec)
			q.Cost = 1 + rng.Int64N(capacity)
			a2, r := For(alg)(a, now, q)
			if !r.Allowed {
				continue
			}
			b2, rb := For(alg)(b, now, q)
			if !rb.Allowed {
				t.Fatalf("case %d: a call admitted with the reservation is denied with the smaller final cost", i)
			}
			a, b = a2, b2
		}
		now += rng.Int64N(2 * sec)
		p.Cost = 1
		a, _, _ = Settle(alg, a, now, p, adm, final)
		for _, later := range []int64{0, sec / 3, sec, 5 * sec} {
			_, ra := For(alg)(a, now+later, Params{Rate: p.Rate, Period: p.Period, Capacity: p.Capacity})
			_, rb := For(alg)(b, now+later, Params{Rate: p.Rate, Period: p.Period, Capacity: p.Capacity})
			if ra.Remaining > rb.Remaining {
				t.Fatalf("case %d %s %+v: %dµs after settling %d of %d: %d left, but %d had the final cost been debited",
					i, alg, p, later, final, reserved, ra.Remaining, rb.Remaining)
			}
		}
	}
}

// With the bucket far from full the whole difference comes back.
func TestSettleGivesBackExactlyFarFromFull(t *testing.T) {
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		p := Params{Rate: 1000, Period: 60 * sec, Capacity: 1000, Cost: 500}
		now := int64(1_700_000_000) * sec
		s, _ := For(alg)(State{}, now, p)
		s, r := For(alg)(s, now, p) // 0 left
		s, _, got := Settle(alg, s, now+sec, p, Admission{Reserved: 500, At: now, Reset: r.ResetAfter, Settled: -1}, 100)
		// 400 back, plus 16 of refill in the second since.
		if got.Remaining != 416 {
			t.Fatalf("%s: %d left after giving 400 back, want 416", alg, got.Remaining)
		}
		_ = s
	}
}

// A call on a full bucket that costs nothing in the end leaves it full,
// however long it ran: what it took it gives back, though the bucket
// refilled meanwhile (SettleFailures on a success); and settling the same
// request again at its reservation takes it again.
func TestSettleGivesBackAfterTime(t *testing.T) {
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		p := Params{Rate: 5, Period: 900 * sec, Capacity: 5, Cost: 1}
		now := int64(1_700_000_000) * sec
		s, r := For(alg)(State{}, now, p)
		for _, ran := range []int64{1, 100_000, 170 * sec} {
			got, w, res := Settle(alg, s, now+ran, p, Admission{Reserved: 1, At: now, Reset: r.ResetAfter, Settled: -1}, 0)
			if w != Delete || res.Remaining != 5 {
				t.Fatalf("%s: a call of %dµs given back: %v %+v, want a full bucket", alg, ran, w, res)
			}
			_, w, res = Settle(alg, got, now+ran, p, Admission{Reserved: 1, At: now, Reset: r.ResetAfter, Settled: 0}, 1)
			if w != Put || res.Remaining != 4 {
				t.Fatalf("%s: settled again at 1: %v %+v, want 4 left", alg, w, res)
			}
		}
	}
}

// A window gives back only while the window debited is stored, and a debt
// in a fixed window lasts until the window ends.
func TestSettleWindows(t *testing.T) {
	start := int64(1_700_000_040) * sec // a minute boundary
	p := Params{Rate: 10, Period: 60 * sec, Capacity: 10, Cost: 5}
	for _, alg := range []tollgate.Algorithm{tollgate.FixedWindow, tollgate.SlidingWindow} {
		s, r := For(alg)(State{}, start+sec, p)
		adm := Admission{Reserved: 5, At: start + sec, Reset: r.ResetAfter, Settled: -1}
		if _, _, got := Settle(alg, s, start+2*sec, p, adm, 1); got.Remaining != 9 {
			t.Errorf("%s: %d left after settling 5 at 1, want 9", alg, got.Remaining)
		}
		// The next window: the fixed window's debit is gone already, the
		// sliding window's counts as the previous window's.
		_, _, got := Settle(alg, s, start+61*sec, p, adm, 1)
		peek := p
		peek.Cost = 0
		_, want := For(alg)(State{Present: true, A: s.A, B: 1, C: s.C}, start+61*sec, peek)
		if got.Remaining != want.Remaining {
			t.Errorf("%s: next window: %d left, want %d", alg, got.Remaining, want.Remaining)
		}
		// Debt: 25 against a rate of 10.
		d, _, got := Settle(alg, s, start+2*sec, p, adm, 25)
		if got.Allowed || got.Remaining != 0 {
			t.Errorf("%s: in debt: %+v", alg, got)
		}
		if alg == tollgate.FixedWindow {
			if got.RetryAfter != 58*sec {
				t.Errorf("fixed window in debt waits %d, want the window's end (58s)", got.RetryAfter)
			}
			if _, r := For(alg)(d, start+60*sec, p); !r.Allowed {
				t.Errorf("fixed window: the next window still denied: %+v", r)
			}
		}
	}
}

// Overdraw debits a cost that does not fit and says it did not.
func TestOverdraw(t *testing.T) {
	p := Params{Rate: 10, Period: 60 * sec, Capacity: 10, Cost: 25}
	now := int64(1_700_000_040) * sec
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.FixedWindow} {
		s, w, r := Overdraw(alg, State{}, now, p)
		if w != Put || r.Allowed || r.Remaining != 0 {
			t.Fatalf("%s: overdraw of 25 on 10: %v %+v", alg, w, r)
		}
		one := p
		one.Cost = 1
		if _, r := For(alg)(s, now+30*sec, one); r.Allowed {
			t.Errorf("%s: admitted half a period after an overdraw of 2.5 periods' worth", alg)
		}
	}
}
