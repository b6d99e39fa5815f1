package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// A step is one call of a case: the clock advances, then a request.
type step struct {
	advance   time.Duration // before the call
	byRetry   bool          // advance by the previous decision's RetryAfter, plus advance (may be negative)
	exactOnly bool          // only on a fake clock: a real one cannot hit a microsecond
	cost      int64
	requestID string
	want      tollgate.Decision
}

func call(cost int64, want tollgate.Decision) step { return step{cost: cost, want: want} }

func (st step) after(d time.Duration) step { st.advance = d; return st }

func (st step) afterRetry(plus time.Duration) step {
	st.byRetry, st.advance = true, plus
	return st
}

func (st step) exact() step { st.exactOnly = true; return st }

func (st step) id(id string) step { st.requestID = id; return st }

func admit(remaining int64, reset time.Duration) tollgate.Decision {
	return tollgate.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, retry, reset time.Duration) tollgate.Decision {
	return tollgate.Decision{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func replay(remaining int64, reset time.Duration) tollgate.Decision {
	return tollgate.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset, Replayed: true}
}

// A tcase is a sequence of steps on one fresh key under one limit.
type tcase struct {
	name  string
	limit tollgate.Limit
	// aligned starts the case at the beginning of a window of
	// limit.Period, so that window algorithms' answers are known.
	aligned bool
	steps   []step
}

const us = time.Microsecond

// ceilDiv is ⌈a/b⌉ in whole microseconds, for expectations that are not a
// whole number of microseconds.
func ceilDiv(a time.Duration, b int64) time.Duration {
	n := a.Microseconds()
	return time.Duration((n+b-1)/b) * us
}

// cases is the table. u is the unit; every bucket limit below refills one
// unit per u, every window is 4u long and admits 4.
func (s *suite) cases() []tcase {
	u := s.unit
	var cs []tcase
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		four := tollgate.Limit{Algorithm: alg, Rate: 4, Period: 4 * u, Burst: 4}
		add := func(name string, l tollgate.Limit, steps ...step) {
			cs = append(cs, tcase{name: alg.String() + "/" + name, limit: l, steps: steps})
		}
		add("fresh bucket", four,
			call(0, admit(3, u)), // cost 0 means 1
		)
		add("burst to empty", four,
			call(1, admit(3, u)),
			call(1, admit(2, 2*u)),
			call(1, admit(1, 3*u)),
			call(1, admit(0, 4*u)),
			call(1, deny(0, u, 4*u)),
		)
		add("denial debits nothing", four,
			call(3, admit(1, 3*u)),
			call(2, deny(1, u, 3*u)), // cost > remaining: denied
			call(2, deny(1, u, 3*u)), // the same again: nothing was taken
			call(1, admit(0, 4*u)),   // cost <= remaining: admitted
		)
		add("refill after advance", four,
			call(4, admit(0, 4*u)),
			call(1, admit(1, 5*u/2)).after(5*u/2), // 2 refilled, half a unit in progress
			call(1, admit(3, u)).after(4*u),       // full again, not beyond
		)
		add("retry after is exact", four,
			call(4, admit(0, 4*u)),
			call(3, deny(0, 3*u, 4*u)),
			call(3, deny(2, us, u+us)).afterRetry(-us).exact(), // one microsecond early
			call(3, admit(0, 4*u)).afterRetry(0),
		)
		add("burst above rate", tollgate.Limit{Algorithm: alg, Rate: 2, Period: 2 * u, Burst: 5},
			call(5, admit(0, 5*u)),
			call(1, deny(0, u, 5*u)),
			call(2, admit(0, 9*u/2)).after(5*u/2),
		)
		// One unit every P/3: not a whole number of microseconds, rounded up.
		third := ceilDiv(u, 3)
		add("fractional interval", tollgate.Limit{Algorithm: alg, Rate: 3, Period: u, Burst: 3},
			call(1, admit(2, third)),
			call(1, admit(1, ceilDiv(2*u, 3))),
			call(1, admit(0, u)),
			call(1, deny(0, third, u)),
			call(1, admit(0, u)).afterRetry(0),
		)
	}

	fixed := tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 4, Period: 4 * u}
	addFixed := func(name string, steps ...step) {
		cs = append(cs, tcase{name: "fixed_window/" + name, limit: fixed, aligned: true, steps: steps})
	}
	addFixed("fresh window", call(1, admit(3, 4*u)))
	addFixed("fill and deny",
		call(4, admit(0, 4*u)),
		call(1, deny(0, 4*u, 4*u)),
		call(1, deny(0, 3*u, 3*u)).after(u),
	)
	addFixed("denial debits nothing",
		call(3, admit(1, 4*u)),
		call(2, deny(1, 4*u, 4*u)),
		call(2, deny(1, 4*u, 4*u)),
		call(1, admit(0, 4*u)),
	)
	addFixed("window rollover",
		call(4, admit(0, 4*u)),
		call(4, admit(0, 7*u/2)).after(9*u/2), // a new window: the old count is gone
		call(1, deny(0, 7*u/2, 7*u/2)),
	)
	addFixed("retry after is exact",
		call(4, admit(0, 4*u)),
		call(1, deny(0, 4*u, 4*u)),
		call(1, deny(0, us, us)).afterRetry(-us).exact(),
		call(1, admit(3, 4*u)).afterRetry(0),
	)

	sliding := tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 4, Period: 4 * u}
	addSliding := func(name string, steps ...step) {
		cs = append(cs, tcase{name: "sliding_window/" + name, limit: sliding, aligned: true, steps: steps})
	}
	addSliding("fresh window", call(1, admit(3, 8*u))) // the count matters until the next window ends
	addSliding("fill and deny",
		call(4, admit(0, 8*u)),
		// 1 fits once this window's 4, weighted in the next, decay to 3: u into it.
		call(1, deny(0, 5*u, 8*u)),
	)
	addSliding("denial debits nothing",
		call(3, admit(1, 8*u)),
		call(2, deny(1, 4*u+ceilDiv(4*u, 3), 8*u)), // 3 × (4u − x)/4u ≤ 2
		call(1, admit(0, 8*u)),
	)
	addSliding("previous window weighted",
		call(4, admit(0, 8*u)),
		// Half way through the next window: 4 × 1/2 = 2 used.
		call(3, deny(2, u, 2*u)).after(6*u),
		call(2, admit(0, 6*u)),
		// A quarter of the previous window left: 4 × 1/4 + 2 = 3 used.
		call(1, admit(0, 5*u)).after(u),
		// 1 more fits once the previous window's weight is gone: u later.
		call(1, deny(0, u, 5*u)),
	)
	addSliding("retry after is exact",
		call(4, admit(0, 8*u)),
		call(2, deny(0, 6*u, 8*u)),
		call(2, deny(1, us, 2*u+us)).afterRetry(-us).exact(),
		call(2, admit(0, 6*u)).afterRetry(0),
	)

	// Request ids, for every algorithm: the replay logic is shared, but each
	// algorithm reports its own remaining and reset on a replay.
	for _, alg := range algorithms {
		l := tollgate.Limit{Algorithm: alg, Rate: 4, Period: 4 * u, Burst: 4}
		// reset(n) is ResetAfter with n used at the case's start; retry is
		// when 1 fits again after 4 were used; after is the decision then.
		var reset func(n int64) time.Duration
		var retry time.Duration
		var after tollgate.Decision
		switch alg {
		case tollgate.TokenBucket, tollgate.GCRA:
			reset = func(n int64) time.Duration { return time.Duration(n) * u }
			retry, after = u, admit(0, 4*u)
		case tollgate.SlidingWindow:
			reset = func(int64) time.Duration { return 8 * u }
			retry, after = 5*u, admit(0, 7*u)
		case tollgate.FixedWindow:
			reset = func(int64) time.Duration { return 4 * u }
			retry, after = 4*u, admit(3, 4*u)
		}
		steps := []step{call(1, admit(3, reset(1))).id("a")}
		for range s.replays {
			steps = append(steps, call(1, replay(3, reset(1))).id("a"))
		}
		steps = append(steps,
			call(1, admit(2, reset(2))).id("a"),  // replays used up: judged and debited afresh
			call(1, replay(2, reset(2))).id("a"), // and replayed again
			call(1, admit(1, reset(3))).id("b"),  // another id is another request
			call(1, admit(0, reset(4))),
			call(1, replay(0, reset(4))).id("b"), // an admitted id replays even when empty
			call(1, deny(0, retry, reset(4))).id("c"),
			// The denial left no trace: once there is room, "c" is debited.
			call(1, after).id("c").afterRetry(0),
			call(1, replay(after.Remaining, after.ResetAfter)).id("c"),
		)
		windowed := alg == tollgate.SlidingWindow || alg == tollgate.FixedWindow
		cs = append(cs, tcase{name: alg.String() + "/request id", limit: l, aligned: windowed, steps: steps})
	}
	return cs
}

// runCase plays one case on a fresh key. On a real clock a busy machine can
// run a step later than planned: the durations a store reports are then
// checked against the lateness measured at that step (never less than Slack
// per step), and a case whose mismatch came after a step ran later than
// that Slack per step (what the case's sizing, see unitFor, allows for
// without a refill or window boundary passing) cannot be judged: it is
// played again on a fresh key, at most twice, and reported.
func (s *suite) runCase(t *testing.T, c tcase) {
	for attempt := 0; ; attempt++ {
		msg, late, budget := s.playCase(t, c, fmt.Sprintf("%s#%d", s.key(t), attempt))
		if msg == "" {
			return
		}
		if s.h.Slack == 0 || late <= budget || attempt == 2 {
			t.Fatal(msg)
		}
		t.Logf("%s\nthe machine ran that step %s late (the case allows for %s): played again on a fresh key", msg, late, budget)
	}
}

// playCase plays c on key, and returns how it first differs from what the
// case wants ("" if it does not), how late the real clock was then, and
// how late the case allows it to be (Slack per step).
func (s *suite) playCase(t *testing.T, c tcase, key string) (msg string, late, budget time.Duration) {
	ctx := context.Background()
	start := time.Now()
	var planned time.Duration // the waits asked for since start
	if c.aligned {
		planned += s.align(t, key, c.limit.Period)
		budget += s.h.Slack
	}
	var last tollgate.Decision
	for i, st := range c.steps {
		if st.exactOnly && s.h.Slack > 0 {
			continue
		}
		wait := st.advance
		if st.byRetry {
			wait += last.RetryAfter
		}
		if wait > 0 {
			s.h.Advance(wait)
			planned += wait
		}
		budget += s.h.Slack
		tol := budget // how short the store's durations may be
		req := tollgate.Request{Key: key, Limit: c.limit, Cost: st.cost, RequestID: st.requestID}
		got, err := s.h.Store.Allow(ctx, req)
		if err != nil {
			t.Fatalf("step %d (cost %d, id %q): %v", i, st.cost, st.requestID, err)
		}
		if s.h.Slack > 0 {
			// Measured after the answer: an upper bound on how late the
			// store's clock was when it decided.
			late = max(0, time.Since(start)-planned)
			tol = max(budget, late+time.Millisecond)
		}
		if m := mismatch(got, st.want, tol); m != "" {
			return fmt.Sprintf("step %d (cost %d, id %q) under %s:\n got %+v\nwant %+v\n%s", i, st.cost, st.requestID, c.limit, got, st.want, m), late, budget
		}
		last = got
	}
	return "", late, budget
}

// align advances the clock to the start of a window of period p: a fresh
// fixed window's ResetAfter is the time left in the current one. It returns
// how far it advanced.
func (s *suite) align(t *testing.T, key string, p time.Duration) time.Duration {
	t.Helper()
	d, err := s.h.Store.Allow(context.Background(), tollgate.Request{
		Key:   key + "/align",
		Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1, Period: p},
	})
	if err != nil || !d.Allowed || d.ResetAfter <= 0 || d.ResetAfter > p {
		t.Fatalf("aligning to a window of %s: got %+v, %v; want admitted with 0 < ResetAfter <= %s", p, d, err, p)
	}
	s.h.Advance(d.ResetAfter)
	return d.ResetAfter
}

// mismatch describes how got differs from want, durations allowed to be up
// to tol short (a real clock runs late, so waits left only shrink).
func mismatch(got, want tollgate.Decision, tol time.Duration) string {
	var bad []string
	if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Replayed != want.Replayed {
		bad = append(bad, "Allowed, Remaining and Replayed must match exactly")
	}
	if got.Remaining < 0 {
		bad = append(bad, "Remaining must never be negative")
	}
	if !got.Allowed && got.RetryAfter <= 0 {
		bad = append(bad, "a denial must say how long to wait")
	}
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{{"RetryAfter", got.RetryAfter, want.RetryAfter}, {"ResetAfter", got.ResetAfter, want.ResetAfter}} {
		if d.got > d.want || d.got < d.want-tol {
			bad = append(bad, fmt.Sprintf("%s must be in [%s, %s]", d.name, d.want-tol, d.want))
		}
	}
	return strings.Join(bad, "; ")
}
