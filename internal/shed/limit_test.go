package shed

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// offer runs calls at rate for d, each holding its seat for hold(n), n the
// calls in flight when it starts, and returns the calls admitted.
func offer(l *Limiter, rate float64, d time.Duration, hold func(n int64) time.Duration) int64 {
	return offerMix(l, rate, d, func(n int64, _ bool) time.Duration { return hold(n) })
}

// offerMix is offer with two classes of call, "fast" and "slow", taking
// turns: each holds its seat for hold(n, slow).
func offerMix(l *Limiter, rate float64, d time.Duration, hold func(n int64, slow bool) time.Duration) int64 {
	var wg sync.WaitGroup
	var inflight, admitted atomic.Int64
	gap := time.Duration(float64(time.Second) / rate)
	i := 0
	for start := time.Now(); time.Since(start) < d; time.Sleep(gap) {
		i++
		slow, class := i%2 == 0, "fast"
		if slow {
			class = "slow"
		}
		wg.Go(func() {
			s, err := l.Acquire(context.Background(), Call{Criticality: Critical, Class: class})
			if err != nil {
				return
			}
			admitted.Add(1)
			n := inflight.Add(1)
			time.Sleep(hold(n, slow))
			inflight.Add(-1)
			s.Done()
		})
	}
	wg.Wait()
	return admitted.Load()
}

// TestLimitSettlesNearTheKneeOfASharedCPU: calls that share one CPU take
// n ms when n run; offered 4 calls/ms, the limit settles near Tolerance
// calls, and the server still completes about one call per ms.
func TestLimitSettlesNearTheKneeOfASharedCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		admitted := offer(l, 4000, 5*time.Second, func(n int64) time.Duration { return time.Duration(n) * time.Millisecond })
		st := l.Stats()
		if st.Limit < 1 || st.Limit > 4 {
			t.Fatalf("limit %.1f after 5s, want near Tolerance (2)", st.Limit)
		}
		if admitted < 4000 { // 5s at about a call per ms, less the start
			t.Fatalf("%d calls admitted in 5s, want about 5000", admitted)
		}
	})
}

// TestLimitGrowsForCallsThatWaitElsewhere: calls that take 10ms whatever
// runs beside them, offered 5 per ms (50 in flight): the limit grows from
// 16 past 50 and nearly every call is admitted.
func TestLimitGrowsForCallsThatWaitElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		offer(l, 5000, 2*time.Second, func(int64) time.Duration { return 10 * time.Millisecond })
		admitted := offer(l, 5000, 2*time.Second, func(int64) time.Duration { return 10 * time.Millisecond })
		if st := l.Stats(); st.Limit < 50 || admitted < 9900 {
			t.Fatalf("limit %.1f, %d of 10000 admitted; want the limit above the 50 in flight and all admitted", st.Limit, admitted)
		}
	})
}

// TestLimitHoldsForAMixOfFastAndSlowMethods: two methods, one answering in
// 1ms and one in 10ms whatever runs beside them, offered 5 calls per ms
// (27 in flight). Against the fast one's latency alone the mix reads as a
// server five times slower than it is, and the limit fell to one call
// (about 130 calls/s admitted of 5000); each compared with its own, the
// limit grows past the calls in flight and nearly every call is admitted.
func TestLimitHoldsForAMixOfFastAndSlowMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		hold := func(_ int64, slow bool) time.Duration {
			if slow {
				return 10 * time.Millisecond
			}
			return time.Millisecond
		}
		offerMix(l, 5000, 2*time.Second, hold)
		admitted := offerMix(l, 5000, 2*time.Second, hold)
		if st := l.Stats(); st.Limit < 28 || admitted < 9900 {
			t.Fatalf("limit %.1f, %d of 10000 admitted; want the limit above the 27 in flight and all admitted", st.Limit, admitted)
		}
	})
}

// TestLimitSettlesForAMixOnASharedCPU: the same two methods sharing one
// CPU (n in flight make each n times slower), offered 4 calls per ms: the
// limit still comes down near Tolerance, and the server still completes
// its capacity (about 180 calls/s: half the calls take 1ms, half 10ms).
func TestLimitSettlesForAMixOnASharedCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		admitted := offerMix(l, 4000, 5*time.Second, func(n int64, slow bool) time.Duration {
			if slow {
				return time.Duration(n) * 10 * time.Millisecond
			}
			return time.Duration(n) * time.Millisecond
		})
		st := l.Stats()
		if st.Limit < 1 || st.Limit > 4 {
			t.Fatalf("limit %.1f after 5s, want near Tolerance (2)", st.Limit)
		}
		if admitted < 700 { // 5s at about 180 a second, less the start
			t.Fatalf("%d calls admitted in 5s, want about 900", admitted)
		}
	})
}

// TestClassesAreBounded: past maxClasses, new classes share one, and a
// class idle for classWindows windows is forgotten.
func TestClassesAreBounded(t *testing.T) {
	o, err := settle(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	g := newGradient(&o, now)
	for i := range 2 * maxClasses {
		g.classOf(strconv.Itoa(i))
	}
	if len(g.classes) != maxClasses || g.classOf("one more") != &g.other {
		t.Fatalf("%d classes kept, want %d and the rest sharing one", len(g.classes), maxClasses)
	}
	c := g.classOf("0")
	g.finished(now, time.Millisecond, true, 0, c)
	g.rotate(now) // the window's minimum becomes its latency alone
	for range classWindows - 1 {
		g.rotate(now)
	}
	if len(g.classes) != 1 || g.classes["0"] != c || c.alone != time.Millisecond {
		t.Fatalf("after %d windows: %d classes, want only the measured one left, its latency alone kept", classWindows, len(g.classes))
	}
	g.rotate(now)
	if len(g.classes) != 0 || c.alone != 0 {
		t.Fatalf("%d classes left once every one is idle", len(g.classes))
	}
}
