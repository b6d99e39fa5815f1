// Package check holds the validation the stores and the interceptor share
// beyond the vocabulary's Validate methods: a request normalized for a
// decision, a settlement's bounds, a request id alone, a constructor's
// argument that is nil. Every error wraps tollgate.ErrInvalidRequest,
// worded as the Validate methods word theirs.
package check

import (
	"fmt"
	"reflect"
	"time"

	"github.com/tollgate/tollgate"
)

// Normalize returns req with Cost 0 replaced by 1, after req.Validate.
func Normalize(req tollgate.Request) (tollgate.Request, error) {
	err := NormalizeInPlace(&req)
	return req, err
}

// NormalizeInPlace is Normalize on *req: the in-process decision paths
// (store.Memory, lease.Store, rlqs.Client) use it, as a copy of the
// request in and one out cost a Memory decision a few percent
// (BenchmarkMemoryAllow).
func NormalizeInPlace(req *tollgate.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if req.Cost == 0 {
		req.Cost = 1
	}
	return nil
}

// Settle reports whether cost can settle req (tollgate.Settler.Settle):
// req must be a valid request that is not Overdraw, cost 0 to MaxRate.
// req's Cost, what was debited, may exceed its capacity (up to MaxRate): a
// refund of hits counted past the limit gives back more than the capacity.
// It returns req normalized.
func Settle(req tollgate.Request, cost int64) (tollgate.Request, error) {
	if req.Overdraw {
		return req, invalid("an Overdraw request debits its cost whole: there is nothing to settle")
	}
	req.Overdraw = true // the range of an overdrawn cost, 1..MaxRate
	req, err := Normalize(req)
	req.Overdraw = false
	if err != nil {
		return req, err
	}
	switch {
	case cost < 0:
		return req, invalid("a final cost must be >= 0, got %d", cost)
	case cost > tollgate.MaxRate:
		return req, invalid("a final cost must be at most MaxRate (10^12), got %d", cost)
	}
	return req, nil
}

// SettleSet checks a set for tollgate.Settler.SettleAll (a set of one for
// Settle): 1 to tollgate.MaxAllowAll requests, one admission and one cost
// each, every request and cost as Settle checks them. It returns the
// requests normalized.
func SettleSet(reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Request, error) {
	switch {
	case len(reqs) == 0:
		return nil, invalid("SettleAll needs at least one request")
	case len(reqs) > tollgate.MaxAllowAll:
		return nil, invalid("SettleAll takes at most %d requests, got %d", tollgate.MaxAllowAll, len(reqs))
	case len(admitted) != len(reqs) || len(costs) != len(reqs):
		return nil, invalid("SettleAll takes one admission and one cost per request: %d requests, %d admissions, %d costs", len(reqs), len(admitted), len(costs))
	}
	out := make([]tollgate.Request, len(reqs))
	for i, req := range reqs {
		n, err := Settle(req, costs[i])
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// RequestID reports whether id can be a tollgate.Request's RequestID: at
// most tollgate.MaxRequestIDLen bytes of printable ASCII (0x21 to 0x7e).
// The empty id is valid and means "no id". It is the check a request
// carrying id passes (tollgate.Request.Validate), alone.
func RequestID(id string) error {
	return tollgate.Request{Limit: idLimit, RequestID: id}.Validate()
}

// idLimit is a valid limit, so that RequestID's request fails on its id
// alone.
var idLimit = tollgate.Limit{Rate: 1, Period: time.Second}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{tollgate.ErrInvalidRequest}, args...)...)
}

// Nil reports whether v is nil or an interface holding a nil pointer, map,
// slice, channel or function: a typed nil (var m *store.Memory passed as a
// tollgate.Store) is not == nil, yet every method call on it fails. The
// constructors taking a store or a client refuse both with an error.
func Nil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
