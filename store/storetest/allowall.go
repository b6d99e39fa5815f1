package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// callers is how many goroutines the AllowAll concurrency cases run.
const callers = 64

// runAllowAll runs the AllowAll, Peek and Reset cases.
func (s *suite) runAllowAll(t *testing.T) {
	s.run(t, "AllowAll validation", s.allowAllValidation)
	s.run(t, "AllowAll in order", s.allowAllInOrder)
	s.run(t, "AllowAll replay", s.allowAllReplay)
	s.run(t, "AllowAll two limits of one identity", s.twoLimitsOneIdentity)
	s.run(t, "AllowAll two identities", s.twoIdentities)
	s.run(t, "Peek never debits", s.peekNeverDebits)
	s.run(t, "Reset restores capacity", s.resetRestores)
}

// allowAll calls AllowAll and fails the test on an error or a reply of the
// wrong length.
func (s *suite) allowAll(t *testing.T, reqs ...tollgate.Request) []tollgate.Decision {
	t.Helper()
	ds, err := s.h.Store.AllowAll(context.Background(), reqs)
	if err != nil {
		t.Fatalf("AllowAll: %v", err)
	}
	if len(ds) != len(reqs) {
		t.Fatalf("AllowAll of %d requests answered %d decisions", len(reqs), len(ds))
	}
	return ds
}

// peek calls Peek and fails the test on an error.
func (s *suite) peek(t *testing.T, req tollgate.Request) tollgate.Decision {
	t.Helper()
	d, err := s.h.Store.Peek(context.Background(), req)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return d
}

// quota admits exactly n and never refills within a test.
func quota(alg tollgate.Algorithm, n int64) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: n, Period: tollgate.MaxPeriod, Burst: n}
}

// allowAllValidation: an empty set, a set over tollgate.MaxAllowAll, mixed
// request ids or an invalid member are refused with ErrInvalidRequest and
// debit nothing.
func (s *suite) allowAllValidation(t *testing.T) {
	ctx := context.Background()
	ok := tollgate.Request{Key: s.key(t), Limit: quota(tollgate.TokenBucket, 3)}
	over := make([]tollgate.Request, tollgate.MaxAllowAll+1)
	for i := range over {
		over[i] = ok
	}
	withID := func(id string) tollgate.Request { r := ok; r.RequestID = id; return r }
	badCost := ok
	badCost.Cost = 4
	for _, c := range []struct {
		name string
		reqs []tollgate.Request
	}{
		{"nil set", nil},
		{"empty set", []tollgate.Request{}},
		{"over MaxAllowAll", over},
		{"mixed request ids", []tollgate.Request{withID("a"), withID("b")}},
		{"an id and none", []tollgate.Request{withID("a"), ok}},
		{"an invalid member", []tollgate.Request{ok, badCost}},
	} {
		ds, err := s.h.Store.AllowAll(ctx, c.reqs)
		if !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: got %+v, %v; want an error wrapping tollgate.ErrInvalidRequest", c.name, ds, err)
		}
	}
	if d := s.peek(t, ok); !d.Allowed || d.Remaining != 2 {
		t.Errorf("after invalid sets: Peek %+v; want a full bucket of 3 (admitted, 2 remaining)", d)
	}
	// A set of exactly MaxAllowAll is decided: 64 requests of one bucket
	// of 3, so the fourth request denies the set.
	full := over[:tollgate.MaxAllowAll]
	ds := s.allowAll(t, full...)
	for i, d := range ds {
		if d.Allowed {
			t.Fatalf("request %d of %d on a bucket of 3: %+v, want denied", i, len(full), d)
		}
	}
	if d := s.peek(t, ok); !d.Allowed || d.Remaining != 2 {
		t.Errorf("after a denied set: Peek %+v; want a full bucket (nothing debited)", d)
	}
}

// allowAllInOrder: requests on one state see the debits of the earlier
// ones; every decision of a denied set is a denial, with a wait only where
// the request itself does not fit.
func (s *suite) allowAllInOrder(t *testing.T) {
	key := s.key(t)
	bucket := tollgate.Request{Key: key, Limit: quota(tollgate.TokenBucket, 5), Cost: 2}
	window := tollgate.Request{Key: key, Limit: quota(tollgate.FixedWindow, 5), Cost: 3}
	ds := s.allowAll(t, bucket, window, bucket)
	for i, want := range []int64{3, 2, 1} {
		if !ds[i].Allowed || ds[i].Remaining != want || ds[i].Replayed {
			t.Fatalf("request %d: %+v; want admitted with %d remaining", i, ds[i], want)
		}
	}
	// 1 unit left in the bucket, 2 in the window.
	window.Cost = 2
	ds = s.allowAll(t, window, bucket)
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 0 {
		t.Fatalf("window request of a denied set: %+v; want denied, no wait, 0 remaining after its share", ds[0])
	}
	if ds[1].Allowed || ds[1].RetryAfter <= 0 || ds[1].Remaining != 1 {
		t.Fatalf("bucket request that does not fit: %+v; want denied with a wait and 1 remaining", ds[1])
	}
	if d := s.peek(t, window); !d.Allowed {
		t.Fatalf("window after a denied set: %+v; want its 2 units still there", d)
	}
}

// allowAllReplay: a set admitted under a request id replays as a whole,
// without a debit, as many times as the store replays; then it is judged
// afresh.
func (s *suite) allowAllReplay(t *testing.T) {
	key := s.key(t)
	a := tollgate.Request{Key: key + "/a", Limit: quota(tollgate.TokenBucket, 10), RequestID: "set-1"}
	b := tollgate.Request{Key: key + "/b", Limit: quota(tollgate.GCRA, 10), RequestID: "set-1"}
	ds := s.allowAll(t, a, b, a)
	if !ds[0].Allowed || ds[0].Replayed || ds[2].Remaining != 8 || ds[1].Remaining != 9 {
		t.Fatalf("first set: %+v; want admitted, 8 and 9 left", ds)
	}
	for n := range s.replays {
		ds := s.allowAll(t, a, b, a)
		for i, d := range ds {
			if !d.Allowed || !d.Replayed {
				t.Fatalf("replay %d, request %d: %+v; want allowed and replayed", n+1, i, d)
			}
		}
		if ds[0].Remaining != 8 || ds[1].Remaining != 9 {
			t.Fatalf("replay %d: %+v; want the current 8 and 9 remaining, nothing debited", n+1, ds)
		}
	}
	ds = s.allowAll(t, a, b, a)
	if !ds[0].Allowed || ds[0].Replayed || ds[2].Remaining != 6 || ds[1].Remaining != 8 {
		t.Fatalf("after %d replays: %+v; want judged afresh and debited (6 and 8 left)", s.replays, ds)
	}
	// A set that is denied leaves no marker: its retry is judged afresh.
	big := tollgate.Request{Key: key + "/c", Limit: quota(tollgate.TokenBucket, 1), Cost: 1, RequestID: "set-2"}
	spent := big
	spent.RequestID = ""
	if d, err := s.h.Store.Allow(context.Background(), spent); err != nil || !d.Allowed {
		t.Fatalf("spending c: %+v, %v", d, err)
	}
	a.RequestID = "set-2"
	for range 2 {
		ds := s.allowAll(t, a, big)
		if ds[0].Allowed || ds[0].Replayed || ds[1].Allowed {
			t.Fatalf("set with a spent member: %+v; want denied, never replayed", ds)
		}
	}
	if d := s.peek(t, a); d.Remaining != 5 {
		t.Fatalf("a after two denied sets: %+v; want 6 left (5 after the peeked unit)", d)
	}
}

// twoLimitsOneIdentity: one identity under "5 per second" (token bucket)
// and "20 per hour" (GCRA, burst 20, so nothing refills within the test),
// 64 callers at once: exactly 20 sets are admitted, and a denied set debits
// neither limit.
func (s *suite) twoLimitsOneIdentity(t *testing.T) {
	key := s.key(t)
	second := tollgate.Request{Key: key, Limit: tollgate.PerSecond(5)}
	hour := tollgate.Request{Key: key, Limit: tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 20, Period: time.Hour, Burst: 20}}
	admitted := s.hammer(t, 20, func() []tollgate.Request { return []tollgate.Request{second, hour} }, 0)
	if admitted[0] != 20 {
		t.Fatalf("%d callers under 5/s and 20/hour admitted %d sets; want exactly 20", callers, admitted[0])
	}
	// The hour is spent. Once the second's bucket is full again, a denied
	// set must have left it full.
	s.h.Advance(time.Second + s.unit)
	ds := s.allowAll(t, second, hour)
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[1].Allowed || ds[1].RetryAfter <= 0 {
		t.Fatalf("set after the hour was spent: %+v; want denied by the hour limit only", ds)
	}
	if d := s.peek(t, second); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("5/s after a denied set: Peek %+v; want a full bucket (admitted, 4 remaining)", d)
	}
	if d := s.peek(t, hour); d.Allowed {
		t.Fatalf("20/hour after 20 admissions: Peek %+v; want denied", d)
	}
}

// twoIdentities: a per-tenant limit of 50 and a global one of 30 in one
// set, 64 callers at once: exactly 30 sets are admitted, and the tenant
// is left with 20.
func (s *suite) twoIdentities(t *testing.T) {
	key := s.key(t)
	tenant := tollgate.Request{Key: key + "/tenant-7", Limit: quota(tollgate.TokenBucket, 50)}
	global := tollgate.Request{Key: key + "/global", Limit: quota(tollgate.TokenBucket, 30)}
	admitted := s.hammer(t, 30, func() []tollgate.Request { return []tollgate.Request{tenant, global} }, 0)
	if admitted[0] != 30 {
		t.Fatalf("%d callers under tenant 50 and global 30 admitted %d sets; want exactly 30", callers, admitted[0])
	}
	if d := s.peek(t, tenant); !d.Allowed || d.Remaining != 19 {
		t.Fatalf("tenant after 30 sets: Peek %+v; want 20 left (19 after the peeked unit)", d)
	}
	if d := s.peek(t, global); d.Allowed {
		t.Fatalf("global after 30 sets: Peek %+v; want denied", d)
	}
}

// hammer runs callers goroutines that call AllowAll with sets from set()
// until want sets were admitted, then each makes extra more calls (which
// must all be denied), and returns {sets admitted, sets denied before want
// was reached}. Between its denied calls a goroutine advances the clock by
// a tenth of the suite's unit (sleeps, on a real clock), so that a
// refilling limit refills. It fails the test when the store errs, or when
// want is not reached within 200 units.
func (s *suite) hammer(t *testing.T, want int64, set func() []tollgate.Request, extra int) [2]int64 {
	t.Helper()
	var admitted, early atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(200 * s.unit)
	if s.h.Slack == 0 {
		deadline = time.Now().Add(time.Minute)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			left := extra + 1
			for left > 0 {
				if time.Now().After(deadline) {
					failed.CompareAndSwap(nil, fmt.Sprintf("only %d of %d sets admitted in time", admitted.Load(), want))
					return
				}
				ds, err := s.h.Store.AllowAll(context.Background(), set())
				if err != nil {
					failed.CompareAndSwap(nil, err.Error())
					return
				}
				if ds[0].Allowed {
					admitted.Add(1)
					continue
				}
				if admitted.Load() >= want {
					left--
					continue
				}
				early.Add(1)
				s.h.Advance(s.unit / 10)
			}
		})
	}
	close(start)
	wg.Wait()
	if msg, ok := failed.Load().(string); ok {
		t.Fatal(msg)
	}
	return [2]int64{admitted.Load(), early.Load()}
}

// peekNeverDebits: any number of peeks, of any cost, leave the state as it
// was; a peek reports what Allow would.
func (s *suite) peekNeverDebits(t *testing.T) {
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 4), RequestID: "peeked"}
		for range 10 {
			if d := s.peek(t, req); !d.Allowed || d.Remaining != 3 || d.Replayed {
				t.Fatalf("%s: peek of a fresh identity %+v; want admitted with 3 remaining", alg, d)
			}
		}
		d, err := s.h.Store.Allow(context.Background(), req)
		if err != nil || !d.Allowed || d.Remaining != 3 || d.Replayed {
			t.Fatalf("%s: Allow after 10 peeks with its request id: %+v, %v; want admitted with 3 remaining, not replayed (a peek records no id)", alg, d, err)
		}
		heavy := req
		heavy.Cost, heavy.RequestID = 4, ""
		if p := s.peek(t, heavy); p.Allowed || p.Remaining != 3 || p.RetryAfter <= 0 {
			t.Fatalf("%s: peek of cost 4 with 3 left: %+v; want denied with a wait", alg, p)
		}
		if p := s.peek(t, tollgate.Request{Key: req.Key, Limit: req.Limit, Cost: 3}); !p.Allowed || p.Remaining != 0 {
			t.Fatalf("%s: peek of cost 3 with 3 left: %+v; want admitted, 0 remaining", alg, p)
		}
	}
}

// resetRestores: after Reset an identity has its whole capacity again,
// under that algorithm only.
func (s *suite) resetRestores(t *testing.T) {
	ctx := context.Background()
	key := s.key(t)
	for _, alg := range algorithms {
		req := tollgate.Request{Key: key, Limit: quota(alg, 3), Cost: 3}
		if d, err := s.h.Store.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("%s: spending the capacity: %+v, %v", alg, d, err)
		}
	}
	for _, alg := range algorithms[:2] {
		if err := s.h.Store.Reset(ctx, tollgate.Request{Key: key, Limit: quota(alg, 3)}); err != nil {
			t.Fatalf("%s: Reset: %v", alg, err)
		}
	}
	for i, alg := range algorithms {
		d := s.peek(t, tollgate.Request{Key: key, Limit: quota(alg, 3), Cost: 3})
		if reset := i < 2; d.Allowed != reset {
			t.Fatalf("%s: after resetting %v: Peek %+v; want admitted only where reset", alg, algorithms[:2], d)
		}
	}
	if err := s.h.Store.Reset(ctx, tollgate.Request{Key: key + "/never-used", Limit: quota(tollgate.GCRA, 3)}); err != nil {
		t.Fatalf("Reset of an identity without state: %v", err)
	}
	if err := s.h.Store.Reset(ctx, tollgate.Request{Key: strings.Repeat("k", tollgate.MaxKeyLen+1), Limit: quota(tollgate.GCRA, 3)}); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("Reset of an oversized key: %v; want an error wrapping ErrInvalidRequest", err)
	}
}
