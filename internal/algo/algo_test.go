package algo

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// TestMulDiv checks MulDiv against big.Int over random operands of every
// magnitude whose quotient fits 63 bits.
func TestMulDiv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		a := rng.Int64N(1 << rng.IntN(63))
		b := rng.Int64N(1 << rng.IntN(63))
		d := 1 + rng.Int64N(1<<rng.IntN(63))
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(d), new(big.Int))
		if !q.IsInt64() {
			continue
		}
		if gq, gr := MulDiv(a, b, d); gq != q.Int64() || gr != r.Int64() {
			t.Fatalf("MulDiv(%d, %d, %d) = %d, %d, want %d, %d", a, b, d, gq, gr, q, r)
		}
	}
}

// TestCalendarWindow checks CalendarWindow at random instants from 1971 to
// 2100: the window holds now, starts where Go's time package says the unit
// starts, ends where the next one starts, and the next one's number is one
// more.
func TestCalendarWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	from := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	end := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for range 20_000 {
		now := from + rng.Int64N(end-from)
		tm := time.UnixMicro(now).UTC()
		y, m, d := tm.Date()
		midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		for c, start := range map[tollgate.Calendar]time.Time{
			tollgate.Day:   midnight,
			tollgate.Week:  midnight.AddDate(0, 0, -((int(tm.Weekday()) + 6) % 7)),
			tollgate.Month: time.Date(y, m, 1, 0, 0, 0, 0, time.UTC),
			tollgate.Year:  time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			w, next := CalendarWindow(c, now)
			if w0, _ := CalendarWindow(c, start.UnixMicro()); w0 != w {
				t.Fatalf("%s at %s: window %d, but %d at its start %s", c, tm, w, w0, start)
			}
			if w1, _ := CalendarWindow(c, start.UnixMicro()-1); w1 != w-1 {
				t.Fatalf("%s at %s: window %d, but %d just before its start %s, want one less", c, tm, w, w1, start)
			}
			if wn, _ := CalendarWindow(c, next); wn != w+1 || next <= now {
				t.Fatalf("%s at %s: next window starts %s numbered %d, want after now and %d", c, tm, time.UnixMicro(next).UTC(), wn, w+1)
			}
			if wl, _ := CalendarWindow(c, next-1); wl != w {
				t.Fatalf("%s at %s: the last µs before the next window is in window %d, want %d", c, tm, wl, w)
			}
		}
	}
}

// TestParamsOfCalendar checks the negative periods that carry calendars
// to the scripts.
func TestParamsOfCalendar(t *testing.T) {
	for c, want := range map[tollgate.Calendar]int64{tollgate.Day: -1, tollgate.Week: -2, tollgate.Month: -3, tollgate.Year: -4} {
		l := tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 5, Calendar: c}
		if p := ParamsOf(tollgate.Request{Limit: l, Cost: 2}); p != (Params{Rate: 5, Period: want, Capacity: 5, Cost: 2}) {
			t.Errorf("%s: %+v, want period %d", l, p, want)
		}
	}
}

// TestRetryAfterFor drives every algorithm to random states and checks,
// for each denial there, that every cost RetryAfterFor claims to know from
// the denial alone gets exactly the RetryAfter the algorithm gives it, and
// that it knows enough of them for the check to mean something.
func TestRetryAfterFor(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, a := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		decide := For(a)
		known, checked := 0, 0
		for range 2_000 {
			p := Params{Rate: 1 + rng.Int64N(12), Period: 1 + rng.Int64N(50_000)}
			p.Capacity = p.Rate
			if a == tollgate.TokenBucket || a == tollgate.GCRA {
				p.Capacity = 1 + rng.Int64N(16)
			}
			var s State
			now := rng.Int64N(1 << 40)
			for range rng.IntN(20) {
				now += rng.Int64N(p.Period)
				q := p
				q.Cost = 1 + rng.Int64N(p.Capacity)
				s, _ = decide(s, now, q)
			}
			for c0 := int64(1); c0 <= p.Capacity; c0++ {
				denied := p
				denied.Cost = c0
				if _, r := decide(s, now, denied); !r.Allowed {
					for c := c0; c <= p.Capacity; c++ {
						q := p
						q.Cost = c
						_, want := decide(s, now, q)
						got, ok := RetryAfterFor(a, denied, r.RetryAfter, r.ResetAfter, c)
						checked++
						if !ok {
							continue
						}
						known++
						if got != want.RetryAfter {
							t.Fatalf("%s %+v on %+v at %d, denied cost %d (retry %d, reset %d): cost %d waits %d, RetryAfterFor says %d",
								a, p, s, now, c0, r.RetryAfter, r.ResetAfter, c, want.RetryAfter, got)
						}
					}
					break
				}
			}
		}
		t.Logf("%s: %d of %d larger costs known from the denial", a, known, checked)
		if known < checked/4 {
			t.Errorf("%s: RetryAfterFor knew %d of %d costs: the check proves little", a, known, checked)
		}
	}
}
