// Package grpcstatus says in gRPC's terms what the engine decided: the
// status and trailers of a refused call, which the gRPC door sends and the
// Connect door converts (Connect's codes and details are gRPC's), and the
// status of an operator's method (Peek, SetOverride, …), which the gRPC
// door and the admin service return.
package grpcstatus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fields"
)

// codeOf maps a refusal's kind to its code.
var codeOf = [...]codes.Code{
	engine.Denied:      codes.ResourceExhausted,
	engine.Blocked:     codes.PermissionDenied,
	engine.Invalid:     codes.InvalidArgument,
	engine.Unavailable: codes.Unavailable,
	engine.Fault:       codes.Internal,
	engine.Canceled:    codes.Canceled,
	engine.Shed:        codes.Unavailable,
}

// Refusal returns the status of the call v refused: the code of its kind
// and its message; for a denial, the details errdetails.RetryInfo (the
// exact wait) and errdetails.QuotaFailure (one violation per denying
// limit, subject "rule:" and the rule, never the caller's identity, as a
// status travels through proxies and logs); for a rule's fault, the status
// its cause carries, when it carries one; for a caller gone, the context's
// code. nil when v admits the call.
func Refusal(v *engine.Verdict) error {
	err := v.Err()
	if err == nil {
		return nil
	}
	kind := v.Kind()
	switch kind {
	case engine.Denied:
		return denial(err.Error(), v.RetryAfter(), v.Limits())
	case engine.Shed:
		return shed(err, v.RetryAfter())
	case engine.Fault:
		var carrier interface{ GRPCStatus() *status.Status }
		if errors.As(errors.Unwrap(err), &carrier) {
			return carrier.GRPCStatus().Err()
		}
	case engine.Canceled:
		if errors.Is(err, context.DeadlineExceeded) {
			return status.Error(codes.DeadlineExceeded, err.Error())
		}
	}
	code := codes.Internal
	if int(kind) < len(codeOf) {
		code = codeOf[kind]
	}
	return statusError{st: status.New(code, err.Error()), err: err}
}

// statusError is a status that wraps the error it was made of.
type statusError struct {
	st  *status.Status
	err error
}

func (e statusError) Error() string              { return e.st.Err().Error() }
func (e statusError) GRPCStatus() *status.Status { return e.st }
func (e statusError) Unwrap() error              { return e.err }

// denial is the ResourceExhausted status of a denial.
func denial(msg string, wait time.Duration, limits []engine.LimitDecision) error {
	var violations []*errdetails.QuotaFailure_Violation
	for _, ld := range limits {
		if !ld.Denied {
			continue
		}
		v := &errdetails.QuotaFailure_Violation{Subject: "rule:" + ld.Rule, QuotaId: ld.Rule}
		retry := roundUp(ld.Decision.RetryAfter, time.Millisecond)
		if ld.Limit == (tollgate.Limit{}) {
			v.Description = fmt.Sprintf("in flight %d exceeded; retry after %s", ld.MaxInFlight, retry)
			v.QuotaValue = ld.MaxInFlight
		} else {
			v.Description = fmt.Sprintf("%s exceeded; retry after %s", ld.Limit, retry)
			v.QuotaValue = ld.Limit.Capacity()
		}
		violations = append(violations, v)
	}
	st := status.New(codes.ResourceExhausted, msg)
	detailed, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.QuotaFailure{Violations: violations},
	)
	if err != nil {
		// Only a proto marshalling bug gets here; the code and message
		// still say what happened.
		return st.Err()
	}
	return detailed.Err()
}

// shed is the Unavailable status of a call overload control shed (the
// server, not the caller, is short), with errdetails.RetryInfo.
func shed(err error, wait time.Duration) error {
	st := status.New(codes.Unavailable, err.Error())
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); derr == nil {
		st = d
	}
	return statusError{st: st, err: err}
}

// roundUp rounds a non-negative d up to a multiple of unit.
func roundUp(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + unit - 1) / unit * unit
}

// Trailer returns the rate-limit trailers of the call v decided (see
// fields.Trailer), or nil: admitted calls carry them only when all
// (engine.Config.AdmittedTrailers).
func Trailer(v *engine.Verdict, all bool) metadata.MD {
	limits := v.Limits()
	if len(limits) == 0 {
		if v.Err() != nil && v.Kind() == engine.Shed {
			// A shed call waits its hint: grpc-go's retry policy reads
			// the pushback.
			wait := v.RetryAfter()
			return metadata.MD{
				fields.RetryAfter: {strconv.FormatInt(fields.Seconds(wait), 10)},
				fields.Pushback:   {strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)},
			}
		}
		return nil
	}
	err := v.Err()
	var md metadata.MD
	var vals []string // one backing array for every value
	fields.Trailer(limits, err != nil, err != nil && v.Kind() == engine.Denied, all, v.RetryAfter(), func(k, val string) {
		if md == nil {
			md, vals = make(metadata.MD, 8), make([]string, 0, 8)
		}
		vals = append(vals, val)
		i := len(vals) - 1
		md[k] = vals[i : i+1 : i+1]
	})
	return md
}

// Of returns the status of err, an error of an operator's method of the
// engine: NotFound for an unknown rule, InvalidArgument for an argument it
// cannot use, FailedPrecondition for a store without what the method needs,
// the context's code for a caller gone, Unavailable for a store that
// failed; nil for nil, and a status as it is. The status still wraps err,
// so that errors.Is(err, engine.ErrUnknownRule) holds of it too.
func Of(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	code := codes.Unavailable
	switch {
	case errors.Is(err, engine.ErrUnknownRule):
		code = codes.NotFound
	case errors.Is(err, tollgate.ErrInvalidRequest):
		code = codes.InvalidArgument
	case errors.Is(err, errors.ErrUnsupported):
		code = codes.FailedPrecondition
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return statusError{st: status.New(code, err.Error()), err: err}
}
