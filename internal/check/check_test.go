package check

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
)

func TestNormalize(t *testing.T) {
	req, err := Normalize(tollgate.Request{Key: "k", Limit: tollgate.PerSecond(5)})
	if err != nil || req.Cost != 1 {
		t.Fatalf("cost 0: %+v, %v; want cost 1", req, err)
	}
	for name, bad := range map[string]tollgate.Request{
		"negative cost":  {Limit: tollgate.PerSecond(5), Cost: -1},
		"above capacity": {Limit: tollgate.PerSecond(5), Cost: 6},
		"bad limit":      {Limit: tollgate.Limit{Rate: 1}},
		"long key":       {Key: strings.Repeat("k", tollgate.MaxKeyLen+1), Limit: tollgate.PerSecond(5)},
		"bad id":         {Limit: tollgate.PerSecond(5), RequestID: "a b"},
	} {
		if _, err := Normalize(bad); !errors.Is(err, tollgate.ErrInvalidRequest) || err.Error() != bad.Validate().Error() {
			t.Errorf("%s: %v, want Request.Validate's error wrapping ErrInvalidRequest", name, err)
		}
	}
}

func TestSettle(t *testing.T) {
	req := tollgate.Request{Key: "k", Limit: tollgate.PerSecond(5), Cost: 50} // hits counted past the limit
	if n, err := Settle(req, 0); err != nil || n.Cost != 50 {
		t.Fatalf("settling a cost above the capacity: %+v, %v; want accepted", n, err)
	}
	over := req
	over.Overdraw = true
	for name, err := range map[string]error{
		"negative":  func() error { _, err := Settle(req, -1); return err }(),
		"above max": func() error { _, err := Settle(req, tollgate.MaxRate+1); return err }(),
		"overdraw":  func() error { _, err := Settle(over, 1); return err }(),
	} {
		if !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestRequestID(t *testing.T) {
	if err := RequestID(""); err != nil {
		t.Fatalf("the empty id: %v, want valid (no id)", err)
	}
	if err := RequestID(strings.Repeat("a", tollgate.MaxRequestIDLen)); err != nil {
		t.Fatalf("an id of MaxRequestIDLen: %v", err)
	}
	for _, id := range []string{strings.Repeat("a", tollgate.MaxRequestIDLen+1), "a b", "é"} {
		if err := RequestID(id); !errors.Is(err, tollgate.ErrInvalidRequest) || !strings.Contains(err.Error(), "request id") {
			t.Errorf("%q: %v, want a request id error wrapping ErrInvalidRequest", id, err)
		}
	}
}

func TestNil(t *testing.T) {
	var p *int
	var f func()
	var m map[string]int
	var st tollgate.Store
	for name, v := range map[string]any{"nil": nil, "pointer": p, "func": f, "map": m, "interface": st} {
		if !Nil(v) {
			t.Errorf("Nil(%s) = false, want true", name)
		}
	}
	for name, v := range map[string]any{"value": 3, "pointer": new(int), "struct": struct{}{}, "func": t.Log} {
		if Nil(v) {
			t.Errorf("Nil(%s) = true, want false", name)
		}
	}
}
