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
	// Skip names the cases the store does not run, each with the reason,
	// for a store whose documented answers differ from a case's: by the
	// case's name as go test prints it under the test calling Run
	// ("settle/settle_past_empty", "sequences/gcra/fresh_bucket"). A skipped
	// case reports its reason; a name that is no case fails the run.
	Skip map[string]string
}

// Run runs the whole suite against h. Keys are unique to the run, so a store
// whose state outlives the run (Redis) can run it again.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Store == nil || h.Advance == nil {
		t.Fatal("storetest: Harness needs a Store and an Advance func")
	}
	s := &suite{h: h, prefix: "storetest:" + randomHex() + ":", unit: unitFor(h.Slack), root: t.Name() + "/", skipped: map[string]bool{}}
	s.replays = s.measureReplays(t)
	defer func() {
		for name := range h.Skip {
			if !s.skipped[name] {
				t.Errorf("storetest: Harness.Skip names %q, which is no case", name)
			}
		}
	}()

	// First what is not timed (and loads the store most), one at a time;
	// then the timed cases.
	s.run(t, "validation", s.validation)
	s.run(t, "key isolation", s.keyIsolation)
	s.run(t, "empty key", s.emptyKey)
	s.runAllowAll(t)
	s.run(t, "settle", s.runSettle)
	s.run(t, "seats", s.runSeats)
	s.run(t, "overrides", s.runOverrides)
	for _, alg := range algorithms {
		s.run(t, "concurrency/"+alg.String(), func(t *testing.T) { s.concurrency(t, alg) })
		s.run(t, "concurrent replays/"+alg.String(), func(t *testing.T) { s.concurrentReplays(t, alg) })
	}
	s.run(t, "sequences", func(t *testing.T) {
		if h.Slack == 0 {
			// A fake clock is shared: one case at a time.
			for _, c := range s.cases() {
				s.run(t, c.name, func(t *testing.T) { s.runCase(t, c) })
			}
			return
		}
		// On a real clock cases mostly sleep, so all of them run at once
		// (t.Parallel would run only GOMAXPROCS at a time).
		var wg sync.WaitGroup
		for _, c := range s.cases() {
			wg.Go(func() { s.run(t, c.name, func(t *testing.T) { s.runCase(t, c) }) })
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
	root    string        // the name of Run's test, and a slash

	mu      sync.Mutex
	skipped map[string]bool // the cases of Harness.Skip met
}

// run runs f as the subtest name of t, unless Harness.Skip names it.
func (s *suite) run(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		rel := strings.TrimPrefix(t.Name(), s.root)
		if why, ok := s.h.Skip[rel]; ok {
			s.mu.Lock()
			s.skipped[rel] = true
			s.mu.Unlock()
			t.Skip(why)
		}
		f(t)
	})
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

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
