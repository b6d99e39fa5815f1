package storetest

import (
	"context"
	"errors"
	"testing"

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
	s.run(t, "overdraw", s.overdraw)
}

// runSettler checks Settle and SettleAll.
func (s *suite) runSettler(t *testing.T) {
	s.run(t, "settle gives back", s.settleGivesBack)
	s.run(t, "settle later", s.settleLater)
	s.run(t, "settle past empty", s.settleDebt)
	s.run(t, "settle once per request id", s.settleIdempotent)
	s.run(t, "settle a set", s.settleAll)
	s.run(t, "settle validation", s.settleValidation)
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
	adms := []tollgate.Admission{ds[0].Admission(), ds[1].Admission()}
	out, err := s.settler().SettleAll(context.Background(), reqs, adms, []int64{1, 9})
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
