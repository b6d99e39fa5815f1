// Package storetest is the conformance suite every tollgate.Store must pass:
// one table of request sequences and the decisions they must produce, plus
// validation, key isolation and concurrency checks.
//
// The suite runs on a fake clock (exact answers, to the microsecond) and on a
// real one (Redis, whose clock cannot be moved): limits and waits are sized
// from Harness.Slack so that jitter can shorten the durations a store reports
// but never flip an admission or a remaining count.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// Harness is what the suite needs to drive one store.
type Harness struct {
	// Store is the store under test.
	Store tollgate.Store
	// Advance moves the store's clock forward by d: a fake clock for the
	// Memory store, time.Sleep for Redis (whose clock cannot be moved).
	// With a real clock (Slack > 0) cases run concurrently, so Advance
	// must be safe for concurrent use; time.Sleep is.
	Advance func(d time.Duration)
	// Slack is how much extra time may pass on a real clock between two
	// steps (0 for a fake clock). Durations in decisions are checked to be
	// within Slack below their exact value.
	Slack time.Duration
	// MaxReplays is the number of replays the store grants an admitted
	// request id, checked exactly when > 0. When 0 the suite measures it and
	// requires at least one.
	MaxReplays int
}

// Run runs the whole suite against h. Keys are unique to the run, so a store
// whose state outlives the run (Redis) can run it again.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Store == nil || h.Advance == nil {
		t.Fatal("storetest: Harness needs a Store and an Advance func")
	}
	s := &suite{h: h, prefix: "storetest:" + randomHex() + ":", unit: unitFor(h.Slack)}
	s.replays = s.measureReplays(t)

	// First what is not timed (and loads the store most), one at a time;
	// then the timed cases.
	t.Run("validation", s.validation)
	t.Run("key isolation", s.keyIsolation)
	t.Run("empty key", s.emptyKey)
	s.runAllowAll(t)
	t.Run("settle", s.runSettle)
	t.Run("seats", s.runSeats)
	t.Run("overrides", s.runOverrides)
	for _, alg := range algorithms {
		t.Run("concurrency/"+alg.String(), func(t *testing.T) { s.concurrency(t, alg) })
		t.Run("concurrent replays/"+alg.String(), func(t *testing.T) { s.concurrentReplays(t, alg) })
	}
	t.Run("sequences", func(t *testing.T) {
		if h.Slack == 0 {
			// A fake clock is shared: one case at a time.
			for _, c := range s.cases() {
				t.Run(c.name, func(t *testing.T) { s.runCase(t, c) })
			}
			return
		}
		// On a real clock cases mostly sleep, so all of them run at once
		// (t.Parallel would run only GOMAXPROCS at a time).
		var wg sync.WaitGroup
		for _, c := range s.cases() {
			wg.Go(func() { t.Run(c.name, func(t *testing.T) { s.runCase(t, c) }) })
		}
		wg.Wait()
	})
}

var algorithms = []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow}

// unitFor is the suite's time unit u: every limit is a few u long and every
// wait a whole or half u, so that a real clock, late by up to Slack at each
// of a case's steps, cannot cross a refill or window boundary (that takes
// u/2 of lateness).
func unitFor(slack time.Duration) time.Duration {
	return max(100*time.Millisecond, 10*slack)
}

type suite struct {
	h       Harness
	prefix  string        // unique to the run
	unit    time.Duration // u, see unitFor
	replays int           // replays per admitted request id
}

func (s *suite) key(t *testing.T) string { return s.prefix + t.Name() }

// measureReplays admits a request id, then repeats it until the store stops
// replaying it, which must be a debit afresh.
func (s *suite) measureReplays(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	req := tollgate.Request{
		Key:       s.prefix + "replays",
		Limit:     tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 100, Period: time.Hour},
		RequestID: "measure",
	}
	d, err := s.h.Store.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Replayed || d.Remaining != 99 {
		t.Fatalf("first request with an id: got %+v, %v; want admitted, 99 remaining", d, err)
	}
	const most = 64
	for n := 0; n <= most; n++ {
		d, err := s.h.Store.Allow(ctx, req)
		if err != nil {
			t.Fatalf("repeat %d of an admitted id: %v", n+1, err)
		}
		if d.Replayed {
			if !d.Allowed || d.Remaining != 99 {
				t.Fatalf("replay %d: got %+v; want allowed, not debited (99 remaining)", n+1, d)
			}
			continue
		}
		if !d.Allowed || d.Remaining != 98 {
			t.Fatalf("after %d replays the id must be judged and debited afresh: got %+v, want admitted with 98 remaining", n, d)
		}
		if n == 0 {
			t.Fatal("an admitted request id was not replayed: the suite needs request ids on (max replays > 0)")
		}
		if s.h.MaxReplays > 0 && n != s.h.MaxReplays {
			t.Fatalf("an admitted request id replayed %d times; want Harness.MaxReplays = %d", n, s.h.MaxReplays)
		}
		return n
	}
	t.Fatalf("a request id replayed more than %d times: replays must be bounded", most)
	return 0
}

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

// runCase plays one case on a fresh key.
func (s *suite) runCase(t *testing.T, c tcase) {
	ctx := context.Background()
	key := s.key(t)
	var tol time.Duration // how late the clock may be, accumulated over the steps
	if c.aligned {
		s.align(t, c.limit.Period)
		tol += s.h.Slack
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
		}
		tol += s.h.Slack
		req := tollgate.Request{Key: key, Limit: c.limit, Cost: st.cost, RequestID: st.requestID}
		got, err := s.h.Store.Allow(ctx, req)
		if err != nil {
			t.Fatalf("step %d (cost %d, id %q): %v", i, st.cost, st.requestID, err)
		}
		if msg := mismatch(got, st.want, tol); msg != "" {
			t.Fatalf("step %d (cost %d, id %q) under %s:\n got %+v\nwant %+v\n%s", i, st.cost, st.requestID, c.limit, got, st.want, msg)
		}
		last = got
	}
}

// align advances the clock to the start of a window of period p: a fresh
// fixed window's ResetAfter is the time left in the current one.
func (s *suite) align(t *testing.T, p time.Duration) {
	t.Helper()
	d, err := s.h.Store.Allow(context.Background(), tollgate.Request{
		Key:   s.key(t) + "/align",
		Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1, Period: p},
	})
	if err != nil || !d.Allowed || d.ResetAfter <= 0 || d.ResetAfter > p {
		t.Fatalf("aligning to a window of %s: got %+v, %v; want admitted with 0 < ResetAfter <= %s", p, d, err, p)
	}
	s.h.Advance(d.ResetAfter)
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

// validation: every malformed request is refused with an error wrapping
// tollgate.ErrInvalidRequest, and leaves no state behind.
func (s *suite) validation(t *testing.T) {
	ctx := context.Background()
	key := s.key(t)
	good := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 4, Period: time.Hour, Burst: 4}
	with := func(f func(*tollgate.Request)) tollgate.Request {
		r := tollgate.Request{Key: key, Limit: good, Cost: 1}
		f(&r)
		return r
	}
	bad := []struct {
		name string
		req  tollgate.Request
	}{
		{"zero rate", with(func(r *tollgate.Request) { r.Limit.Rate = 0 })},
		{"negative rate", with(func(r *tollgate.Request) { r.Limit.Rate = -1 })},
		{"zero period", with(func(r *tollgate.Request) { r.Limit.Period = 0 })},
		{"period below 1ms", with(func(r *tollgate.Request) { r.Limit.Period = 999 * us })},
		{"period above 366 days", with(func(r *tollgate.Request) { r.Limit.Period = tollgate.MaxPeriod + time.Second })},
		{"negative burst", with(func(r *tollgate.Request) { r.Limit.Burst = -1 })},
		{"unknown algorithm", with(func(r *tollgate.Request) { r.Limit.Algorithm = tollgate.FixedWindow + 1 })},
		{"algorithm 255", with(func(r *tollgate.Request) { r.Limit.Algorithm = 255 })},
		{"rate above 10^12", with(func(r *tollgate.Request) { r.Limit = tollgate.Limit{Rate: tollgate.MaxRate + 1, Period: time.Hour} })},
		{"burst above 10^12", with(func(r *tollgate.Request) { r.Limit.Burst = tollgate.MaxRate + 1 })},
		{"refill beyond 100 years", with(func(r *tollgate.Request) { r.Limit.Rate, r.Limit.Burst, r.Limit.Period = 1, 200, tollgate.MaxPeriod })},
		{"calendar on a token bucket", with(func(r *tollgate.Request) { r.Limit.Calendar, r.Limit.Period = tollgate.Month, 0 })},
		{"calendar with a period", with(func(r *tollgate.Request) { r.Limit = tollgate.Daily(4); r.Limit.Period = time.Hour })},
		{"negative cost", with(func(r *tollgate.Request) { r.Cost = -1 })},
		{"cost above burst", with(func(r *tollgate.Request) { r.Cost = 5 })},
		{"window cost above rate, burst ignored", with(func(r *tollgate.Request) {
			r.Limit = tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 4, Period: time.Hour, Burst: 10}
			r.Cost = 5
		})},
		{"fixed window cost above rate", with(func(r *tollgate.Request) {
			r.Limit = tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 4, Period: time.Hour, Burst: 10}
			r.Cost = 5
		})},
		{"request id with a space", with(func(r *tollgate.Request) { r.RequestID = "a b" })},
		{"request id with DEL", with(func(r *tollgate.Request) { r.RequestID = "a\x7f" })},
		{"request id not ASCII", with(func(r *tollgate.Request) { r.RequestID = "é" })},
		{"request id too long", with(func(r *tollgate.Request) { r.RequestID = strings.Repeat("x", tollgate.MaxRequestIDLen+1) })},
		{"key of 65 KiB", with(func(r *tollgate.Request) { r.Key = key + strings.Repeat("k", 65<<10) })},
	}
	for _, b := range bad {
		d, err := s.h.Store.Allow(ctx, b.req)
		if !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: got %+v, %v; want an error wrapping tollgate.ErrInvalidRequest", b.name, d, err)
		}
	}
	// Nothing above was debited: the bucket is full.
	d, err := s.h.Store.Allow(ctx, tollgate.Request{Key: key, Limit: good})
	if err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("after invalid requests: got %+v, %v; want admitted with 3 remaining (invalid requests debit nothing)", d, err)
	}
}

// keyIsolation: keys that differ in any way, however hostile, have their own
// state, so that no identity can spend or move another's quota.
func (s *suite) keyIsolation(t *testing.T) {
	ctx := context.Background()
	run := s.key(t)
	big := strings.Repeat("k", 60_000)
	hostile := []string{
		"{", "}", "{}", "}{", "{x}", "x", "{x", "x}", "{{x}}", "{x}{y}",
		":", "a", "a:b", "a:1", "r:a", "n:a", "a\x00b", "a\x00c", "\x00", "\x00\x01", "\xff\xfe", "\xff",
		" ", "\n", "%", "%7B", "日本", "\\", "*", "?",
		big, big[1:] + "j", "j" + big[1:], big[1:] + "k\x00",
	}
	keys := make([]string, 0, len(hostile))
	for _, k := range hostile {
		// The run's prefix both before and after, so that braces at
		// either end stay at the key's edge.
		keys = append(keys, k+run, run+k)
	}
	hour := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Hour}
	for pass, want := range []tollgate.Decision{admit(0, time.Hour), deny(0, time.Hour, time.Hour)} {
		tol := 2 * time.Duration(len(keys)) * s.h.Slack
		for _, k := range keys {
			d, err := s.h.Store.Allow(ctx, tollgate.Request{Key: k, Limit: hour})
			if err != nil {
				t.Fatalf("key %q: %v", trim(k), err)
			}
			if msg := mismatch(d, want, tol); msg != "" {
				t.Fatalf("pass %d, key %q: got %+v, want %+v: %s (keys share state?)", pass, trim(k), d, want, msg)
			}
		}
	}
	// The same key under another algorithm has its own state.
	d, err := s.h.Store.Allow(ctx, tollgate.Request{Key: keys[0], Limit: tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 1, Period: time.Hour}})
	if err != nil || !d.Allowed || d.Replayed {
		t.Fatalf("the same key under GCRA: got %+v, %v; want admitted (algorithms do not share state)", d, err)
	}
	// The same request id on two keys, or under two algorithms, is two
	// requests.
	for _, k := range keys[2:4] {
		id := tollgate.Request{Key: k + "/id", Limit: hour, RequestID: "shared"}
		d, err := s.h.Store.Allow(ctx, id)
		if err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("request id on key %q: got %+v, %v; want admitted, not replayed", trim(k), d, err)
		}
	}
	for _, alg := range algorithms {
		id := tollgate.Request{Key: run + "/id", Limit: tollgate.Limit{Algorithm: alg, Rate: 1, Period: time.Hour}, RequestID: "shared"}
		d, err := s.h.Store.Allow(ctx, id)
		if err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("request id under %s: got %+v, %v; want admitted, not replayed", alg, d, err)
		}
	}
}

// emptyKey: the empty identity is a key like any other. It cannot be unique
// to the run, so its limit refills within a millisecond.
func (s *suite) emptyKey(t *testing.T) {
	ms := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Millisecond}
	s.h.Advance(time.Millisecond) // whatever an earlier run left has refilled
	d, err := s.h.Store.Allow(context.Background(), tollgate.Request{Key: "", Limit: ms})
	if err != nil {
		t.Fatalf("empty key: %v", err)
	}
	if msg := mismatch(d, admit(0, time.Millisecond), s.h.Slack); msg != "" {
		t.Fatalf("empty key: got %+v: %s", d, msg)
	}
}

func trim(k string) string {
	if len(k) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", k[:40], len(k))
	}
	return k
}

// Concurrency: goroutines × calls on one key of capacity 100, with a 366-day
// period so that nothing refills (or rolls over) during the test.
const (
	goroutines = 16
	callsEach  = 25
	capacity   = 100
)

func weekLimit(alg tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: capacity, Period: tollgate.MaxPeriod, Burst: capacity}
}

// fanOut runs req from many goroutines at once and returns every decision.
func (s *suite) fanOut(t *testing.T, req tollgate.Request, perGoroutine int) []tollgate.Decision {
	t.Helper()
	var (
		mu    sync.Mutex
		all   []tollgate.Decision
		errs  []error
		start = make(chan struct{})
		wg    sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			<-start
			var mine []tollgate.Decision
			for range perGoroutine {
				d, err := s.h.Store.Allow(context.Background(), req)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mine = append(mine, d)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(errs), errs[0])
	}
	return all
}

// concurrency: exactly the capacity is admitted, each admission leaving a
// different remaining count, 99 down to 0.
func (s *suite) concurrency(t *testing.T, alg tollgate.Algorithm) {
	all := s.fanOut(t, tollgate.Request{Key: s.key(t), Limit: weekLimit(alg)}, callsEach)
	var remaining []int64
	for _, d := range all {
		switch {
		case d.Allowed:
			remaining = append(remaining, d.Remaining)
		case d.Remaining != 0 || d.RetryAfter <= 0:
			t.Fatalf("denial %+v: want 0 remaining and a positive RetryAfter", d)
		}
	}
	if len(remaining) != capacity {
		t.Fatalf("%d goroutines × %d calls admitted %d; want exactly %d", goroutines, callsEach, len(remaining), capacity)
	}
	slices.Sort(remaining)
	for i, r := range remaining {
		if r != int64(i) {
			t.Fatalf("admissions left remaining %v; want each of 0..%d exactly once", remaining, capacity-1)
		}
	}
}

// concurrentReplays: calls that all carry one request id are debited once
// per 1+replays of them, never more, never less.
func (s *suite) concurrentReplays(t *testing.T, alg tollgate.Algorithm) {
	const each = 3
	all := s.fanOut(t, tollgate.Request{Key: s.key(t), Limit: weekLimit(alg), RequestID: "one-id"}, each)
	debited := 0
	for _, d := range all {
		if !d.Allowed {
			t.Fatalf("denial %+v: the capacity exceeds the calls", d)
		}
		if !d.Replayed {
			debited++
		}
	}
	calls := goroutines * each
	if want := (calls + s.replays) / (1 + s.replays); debited != want {
		t.Fatalf("%d calls with one id, %d replays per admission: %d debited; want %d", calls, s.replays, debited, want)
	}
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
