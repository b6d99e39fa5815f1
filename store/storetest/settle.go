package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// runSettle checks a Settler's Settle and SettleAll, and Request.Overdraw:
// giving back, debt, idempotency per request id, windows given back only
// while stored, and the validation of settlements. A store that does not
// settle runs the overdraw checks only.
func (s *suite) runSettle(t *testing.T) {
	if _, ok := s.h.Store.(tollgate.Settler); ok {
		s.runSettler(t)
	} else {
		t.Logf("%T is not a tollgate.Settler: settlements not checked", s.h.Store)
	}
	t.Run("overdraw", s.overdraw)
}

// runSettler checks Settle and SettleAll.
func (s *suite) runSettler(t *testing.T) {
	t.Run("settle gives back", s.settleGivesBack)
	t.Run("settle later", s.settleLater)
	t.Run("settle past empty", s.settleDebt)
	t.Run("settle once per request id", s.settleIdempotent)
	t.Run("settle a set", s.settleAll)
	t.Run("settle validation", s.settleValidation)
}

// settler is the store under test as a Settler (runSettle checked it is).
func (s *suite) settler() tollgate.Settler { return s.h.Store.(tollgate.Settler) }

// admitted admits req and returns its Decision.
func (s *suite) admitted(t *testing.T, req tollgate.Request) tollgate.Decision {
	t.Helper()
	d, err := s.h.Store.Allow(context.Background(), req)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow(%+v) = %+v, %v; want admitted", req, d, err)
	}
	return d
}

func (s *suite) settle(t *testing.T, req tollgate.Request, adm tollgate.Decision, cost int64) tollgate.Decision {
	t.Helper()
	d, err := s.settler().Settle(context.Background(), req, adm.Admission(), cost)
	if err != nil {
		t.Fatalf("Settle(%+v, %d): %v", req, cost, err)
	}
	return d
}

// available is what a cost-1 Peek says req's identity has now, and its
// Debt.
func (s *suite) available(t *testing.T, req tollgate.Request) (int64, int64) {
	t.Helper()
	req.Cost, req.RequestID = 1, ""
	d := s.peek(t, req)
	if d.Allowed {
		return d.Remaining + 1, d.Debt
	}
	return d.Remaining, d.Debt
}

// settleGivesBack: a call reserving 5 of 10 and costing 2 leaves 8, on
// every algorithm; settling at the reservation changes nothing.
func (s *suite) settleGivesBack(t *testing.T) {
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 10), Cost: 5}
		adm := s.admitted(t, req)
		if d := s.settle(t, req, adm, 5); !d.Allowed || d.Remaining != 5 || d.Debt != 0 {
			t.Fatalf("%s: settled at the reservation: %+v; want 5 available, no debt", alg, d)
		}
		d := s.settle(t, req, adm, 2)
		if !d.Allowed || d.Remaining != 8 || d.Debt != 0 {
			t.Fatalf("%s: settled at 2 of 5: %+v; want 8 available", alg, d)
		}
		if got, _ := s.available(t, req); got != 8 {
			t.Fatalf("%s: Peek after the settlement: %d available, want 8", alg, got)
		}
		if d.At.IsZero() {
			t.Fatalf("%s: a settlement's Decision has no At", alg)
		}
	}
}

// settleLater: a call settled at 0 a while after its admission gives its
// whole reservation back, on every algorithm: the bucket it left full is
// full again.
func (s *suite) settleLater(t *testing.T) {
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 10), Cost: 3}
		adm := s.admitted(t, req)
		s.h.Advance(s.unit)
		if d := s.settle(t, req, adm, 0); d.Remaining != 10 {
			t.Fatalf("%s: settled at 0 after a while: %+v; want all 10 back", alg, d)
		}
	}
}

// settleDebt: a call reserving 1 of 10 and costing 15 leaves the identity 5
// units in debt: denied, 0 remaining, Debt 5, on every algorithm.
func (s *suite) settleDebt(t *testing.T) {
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 10), Cost: 1}
		adm := s.admitted(t, req)
		d := s.settle(t, req, adm, 15)
		if d.Allowed || d.Remaining != 0 || d.Debt != 5 || d.RetryAfter <= 0 {
			t.Fatalf("%s: settled at 15 of 10: %+v; want denied, 0 remaining, 5 owed and a wait", alg, d)
		}
		if got, debt := s.available(t, req); got != 0 || debt != 5 {
			t.Fatalf("%s: Peek in debt: %d available, %d owed; want 0 and 5", alg, got, debt)
		}
		if d, err := s.h.Store.Allow(context.Background(), req); err != nil || d.Allowed {
			t.Fatalf("%s: a call while in debt: %+v, %v; want denied", alg, d, err)
		}
	}
}

// settleIdempotent: settling one request id again applies only the
// difference from its last settlement.
func (s *suite) settleIdempotent(t *testing.T) {
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 20), Cost: 10, RequestID: "call-1"}
		adm := s.admitted(t, req)
		for range 3 {
			if d := s.settle(t, req, adm, 4); d.Remaining != 16 {
				t.Fatalf("%s: settled (again) at 4 of 10: %+v; want 16 available once", alg, d)
			}
		}
		if d := s.settle(t, req, adm, 7); d.Remaining != 13 {
			t.Fatalf("%s: settled again at 7: %+v; want 13 (only the difference from 4)", alg, d)
		}
		if d := s.settle(t, req, adm, 25); d.Remaining != 0 || d.Debt != 5 {
			t.Fatalf("%s: settled again at 25: %+v; want 5 owed", alg, d)
		}
	}
}

// settleAll: a set AllowAll admitted is settled each request at its own
// cost.
func (s *suite) settleAll(t *testing.T) {
	key := s.key(t)
	reqs := []tollgate.Request{
		{Key: key + "/a", Limit: quota(tollgate.TokenBucket, 10), Cost: 4},
		{Key: key + "/b", Limit: quota(tollgate.FixedWindow, 10), Cost: 4},
	}
	ds := s.allowAll(t, reqs...)
	out, err := s.settler().SettleAll(context.Background(), reqs, admissions(ds), []int64{1, 9})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 9 || out[1].Remaining != 1 {
		t.Fatalf("SettleAll at 1 and 9 of 4 each: %+v; want 9 and 1 available", out)
	}
}

// settleValidation: a negative or oversized cost, mismatched lengths, an
// overdrawn request or an invalid one is refused with ErrInvalidRequest and
// settles nothing.
func (s *suite) settleValidation(t *testing.T) {
	ctx := context.Background()
	req := tollgate.Request{Key: s.key(t), Limit: quota(tollgate.TokenBucket, 10), Cost: 5}
	adm := s.admitted(t, req).Admission()
	st := s.settler()
	for name, call := range map[string]func() error{
		"negative cost": func() error { _, err := st.Settle(ctx, req, adm, -1); return err },
		"cost above MaxRate": func() error {
			_, err := st.Settle(ctx, req, adm, tollgate.MaxRate+1)
			return err
		},
		"no limit": func() error {
			bad := req
			bad.Limit = tollgate.Limit{}
			_, err := st.Settle(ctx, bad, adm, 1)
			return err
		},
		"overdrawn": func() error {
			bad := req
			bad.Overdraw = true
			_, err := st.Settle(ctx, bad, adm, 1)
			return err
		},
		"lengths": func() error {
			_, err := st.SettleAll(ctx, []tollgate.Request{req, req}, []tollgate.Admission{adm}, []int64{1, 1})
			return err
		},
		"empty": func() error { _, err := st.SettleAll(ctx, nil, nil, nil); return err },
	} {
		if err := call(); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidRequest", name, err)
		}
	}
	if got, _ := s.available(t, req); got != 5 {
		t.Fatalf("after refused settlements: %d available, want 5", got)
	}
}

// overdraw: a request debited whether or not it fits reports whether it
// did, and leaves the identity in debt when it did not.
func (s *suite) overdraw(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		req := tollgate.Request{Key: s.key(t) + "/" + alg.String(), Limit: quota(alg, 10), Cost: 6, Overdraw: true}
		d, err := s.h.Store.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Remaining != 4 {
			t.Fatalf("%s: overdraw of 6 that fits: %+v, %v; want admitted, 4 left", alg, d, err)
		}
		req.Cost = 25 // more than the capacity: counted all the same
		d, err = s.h.Store.Allow(ctx, req)
		owed := int64(21)
		if alg == tollgate.SlidingWindow {
			owed = 10 // a sliding window counts at most twice its rate
		}
		if err != nil || d.Allowed || d.Remaining != 0 || d.Debt != owed {
			t.Fatalf("%s: overdraw of 25 on 4 left: %+v, %v; want not fitted, %d owed", alg, d, err, owed)
		}
		if ds, err := s.h.Store.AllowAll(ctx, []tollgate.Request{req, {Key: req.Key + "/x", Limit: req.Limit, Cost: 1}}); err == nil {
			t.Fatalf("%s: AllowAll mixing overdrawn requests and others: %+v, want ErrInvalidRequest", alg, ds)
		}
	}
}

// runSeats checks a SeatStore's in-flight seats.
func (s *suite) runSeats(t *testing.T) {
	ss, ok := s.h.Store.(tollgate.SeatStore)
	if !ok {
		t.Skipf("%T is not a tollgate.SeatStore", s.h.Store)
	}
	ctx := context.Background()
	key := s.key(t)
	ttl := 4 * s.unit
	seat := func(id string) tollgate.Seat { return tollgate.Seat{Key: key, Max: 2, ID: id, TTL: ttl} }
	for i, id := range []string{"a", "b"} {
		d, err := ss.AcquireSeat(ctx, seat(id))
		if err != nil || !d.Allowed || d.InUse != int64(i+1) || d.Reused {
			t.Fatalf("seat %s: %+v, %v; want taken, %d in use", id, d, err, i+1)
		}
	}
	d, err := ss.AcquireSeat(ctx, seat("c"))
	if err != nil || d.Allowed || d.InUse != 2 || d.RetryAfter <= 0 || d.RetryAfter > ttl {
		t.Fatalf("a third seat of 2: %+v, %v; want denied with a wait up to the TTL", d, err)
	}
	if d, err := ss.AcquireSeat(ctx, seat("a")); err != nil || !d.Allowed || !d.Reused || d.InUse != 2 {
		t.Fatalf("seat a again: %+v, %v; want it reused", d, err)
	}
	if err := ss.ReleaseSeat(ctx, seat("a")); err != nil {
		t.Fatal(err)
	}
	if err := ss.ReleaseSeat(ctx, seat("a")); err != nil {
		t.Fatalf("releasing a seat not held: %v, want nil", err)
	}
	if n, err := ss.SeatsInUse(ctx, key); err != nil || n != 1 {
		t.Fatalf("SeatsInUse after a release: %d, %v; want 1", n, err)
	}
	if ok, err := ss.RenewSeat(ctx, seat("a")); err != nil || ok {
		t.Fatalf("renewing a released seat: %v, %v; want false", ok, err)
	}
	// Seat b expires by itself.
	s.h.Advance(ttl + s.unit)
	if n, err := ss.SeatsInUse(ctx, key); err != nil || n != 0 {
		t.Fatalf("SeatsInUse after the TTL: %d, %v; want 0", n, err)
	}
	if err := (tollgate.Seat{Key: key, Max: 0, ID: "x", TTL: time.Second}).Validate(); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("Max 0: %v, want ErrInvalidRequest", err)
	}
	if _, err := ss.AcquireSeat(ctx, tollgate.Seat{Key: key, Max: 1, ID: "x"}); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("a seat without a TTL: %v, want ErrInvalidRequest", err)
	}
	s.runSeatHolds(t, ss)
	s.runSeatAllower(t)
}

// runSeatAllower checks a SeatAllower's and a SeatSettler's one-step
// operations: a seat and its call's debits all or nothing, and a call's
// settlement with its release.
func (s *suite) runSeatAllower(t *testing.T) {
	sa, ok := s.h.Store.(tollgate.SeatAllower)
	if !ok {
		return
	}
	ctx := context.Background()
	key := s.key(t) + "/together"
	req := tollgate.Request{Key: key, Limit: tollgate.Limit{Rate: 2, Period: time.Hour}, Cost: 1, RequestID: "r1"}
	seat := tollgate.Seat{Key: key, Max: 1, ID: "a", TTL: time.Hour}
	sd, ds, err := sa.AllowAllWithSeat(ctx, seat, []tollgate.Request{req})
	if err != nil || !sd.Allowed || sd.InUse != 1 || len(ds) != 1 || !ds[0].Allowed || ds[0].Remaining != 1 {
		t.Fatalf("a seat and a debit: %+v %+v %v; want both, 1 left", sd, ds, err)
	}
	other := seat
	other.ID = "b"
	req2 := req
	req2.RequestID = "r2"
	sd, ds, err = sa.AllowAllWithSeat(ctx, other, []tollgate.Request{req2})
	if err != nil || sd.Allowed || ds != nil || sd.RetryAfter <= 0 {
		t.Fatalf("no seat free: %+v %+v %v; want denied, nothing judged", sd, ds, err)
	}
	if d, err := s.h.Store.Peek(ctx, req); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after a call refused for lack of a seat: %+v %v; want one more admitted (nothing debited)", d, err)
	}
	st, ok := s.h.Store.(tollgate.SeatSettler)
	if !ok {
		t.Fatalf("%T takes a seat with its debits but cannot settle with a release (tollgate.SeatSettler)", s.h.Store)
	}
	seat.Held = time.Second
	got, err := st.SettleAllAndRelease(ctx, []tollgate.Request{req}, ds1(t, sa, req), []int64{0}, []tollgate.Seat{seat})
	if err != nil || len(got) != 1 || got[0].Remaining != 2 {
		t.Fatalf("settled at 0 and released: %+v %v; want 2 left", got, err)
	}
	if n, err := st.SeatsInUse(ctx, key); err != nil || n != 0 {
		t.Fatalf("seats in use after the release: %d %v; want 0", n, err)
	}
	req3 := req
	req3.RequestID, req3.Cost = "r3", 2
	if _, err := s.h.Store.Allow(ctx, req3); err != nil {
		t.Fatal(err)
	}
	sd, ds, err = sa.AllowAllWithSeat(ctx, other, []tollgate.Request{req2})
	if err != nil || sd.Allowed || len(ds) != 1 || ds[0].Allowed {
		t.Fatalf("a free seat and an empty bucket: %+v %+v %v; want the rate denied and no seat held", sd, ds, err)
	}
	if n, err := st.SeatsInUse(ctx, key); err != nil || n != 0 {
		t.Fatalf("seats in use after a denied call: %d %v; want 0", n, err)
	}
	if _, err := st.SettleAllAndRelease(ctx, nil, nil, nil, []tollgate.Seat{other}); err != nil {
		t.Fatalf("releases alone: %v", err)
	}
}

// ds1 returns the admission of req (already debited) for a settlement: a
// replay of its request id.
func ds1(t *testing.T, st tollgate.Store, req tollgate.Request) []tollgate.Admission {
	t.Helper()
	d, err := st.Allow(context.Background(), req)
	if err != nil || !d.Replayed {
		t.Fatalf("a replay of %q: %+v %v", req.RequestID, d, err)
	}
	return []tollgate.Admission{d.Admission()}
}

// admissions returns the admissions of ds, for a settlement.
func admissions(ds []tollgate.Decision) []tollgate.Admission {
	adms := make([]tollgate.Admission, len(ds))
	for i, d := range ds {
		adms[i] = d.Admission()
	}
	return adms
}

// runSeatHolds checks the mean hold time a SeatStore keeps from releases
// (Seat.Held) and reports with a denial (SeatDecision.Hold): the first
// hold as it is, then an exponential mean in which each weighs 1/8, in
// whole microseconds; a release of unknown hold time changes nothing.
func (s *suite) runSeatHolds(t *testing.T, ss tollgate.SeatStore) {
	ctx := context.Background()
	key := s.key(t) + "/holds"
	seat := tollgate.Seat{Key: key, Max: 1, ID: "a", TTL: time.Hour}
	deny := func() time.Duration {
		t.Helper()
		if d, err := ss.AcquireSeat(ctx, seat); err != nil || !d.Allowed {
			t.Fatalf("seat a: %+v, %v", d, err)
		}
		other := seat
		other.ID = "b"
		d, err := ss.AcquireSeat(ctx, other)
		if err != nil || d.Allowed {
			t.Fatalf("a second seat of 1: %+v, %v; want denied", d, err)
		}
		return d.Hold
	}
	release := func(held time.Duration) {
		t.Helper()
		r := seat
		r.Held = held
		if err := ss.ReleaseSeat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if h := deny(); h != 0 {
		t.Fatalf("Hold before any release: %s, want 0", h)
	}
	release(800 * time.Millisecond)
	if h := deny(); h != 800*time.Millisecond {
		t.Fatalf("Hold after one release of 800ms: %s, want 800ms", h)
	}
	release(0) // unknown: the mean stays
	if h := deny(); h != 800*time.Millisecond {
		t.Fatalf("Hold after a release of unknown length: %s, want 800ms", h)
	}
	release(1600 * time.Millisecond)
	if h, want := deny(), 800*time.Millisecond-100*time.Millisecond+200*time.Millisecond; h != want {
		t.Fatalf("Hold after 800ms then 1.6s: %s, want %s", h, want)
	}
	release(0)
}

// runOverrides checks an OverrideStore.
func (s *suite) runOverrides(t *testing.T) {
	os, ok := s.h.Store.(tollgate.OverrideStore)
	if !ok {
		t.Skipf("%T is not a tollgate.OverrideStore", s.h.Store)
	}
	ctx := context.Background()
	scope := s.key(t)
	v0, err := os.OverridesVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limits := []tollgate.Limit{tollgate.PerMinute(5), tollgate.Daily(100)}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "a", Limits: limits}, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "b"}, 4*s.unit); err != nil {
		t.Fatal(err)
	}
	if v, err := os.OverridesVersion(ctx); err != nil || v == v0 {
		t.Fatalf("version after two overrides: %d, %v; want it changed from %d", v, err, v0)
	}
	list, err := os.Overrides(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list, func(x, y tollgate.Override) int { return len(y.Limits) - len(x.Limits) })
	if len(list) != 2 || list[0].Key != "a" || !slices.Equal(list[0].Limits, limits) || !list[0].Expires.IsZero() ||
		list[1].Key != "b" || len(list[1].Limits) != 0 || list[1].Expires.IsZero() {
		t.Fatalf("Overrides = %+v; want a with its limits forever and b blocked for a while", list)
	}
	if other, err := os.Overrides(ctx, scope+"/other"); err != nil || len(other) != 0 {
		t.Fatalf("another scope's overrides: %+v, %v; want none", other, err)
	}
	s.h.Advance(4*s.unit + s.unit)
	if list, err := os.Overrides(ctx, scope); err != nil || len(list) != 1 || list[0].Key != "a" {
		t.Fatalf("after b's TTL: %+v, %v; want a alone", list, err)
	}
	if err := os.DeleteOverride(ctx, scope, "a"); err != nil {
		t.Fatal(err)
	}
	if list, err := os.Overrides(ctx, scope); err != nil || len(list) != 0 {
		t.Fatalf("after deleting a: %+v, %v; want none", list, err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "c", Limits: []tollgate.Limit{{Rate: -1}}}, 0); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("an invalid limit: %v, want ErrInvalidRequest", err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "c"}, -time.Second); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("a negative TTL: %v, want ErrInvalidRequest", err)
	}
}
