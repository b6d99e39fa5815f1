package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

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
	seat.Hold = time.Second
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

// runSeatHolds checks the mean hold time a SeatStore keeps from releases
// (Seat.Hold) and reports with a denial (SeatDecision.Hold): the first
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
		r.Hold = held
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
