// Package connectlimit is the connect-go (connectrpc.com/connect) door of
// a tollgate engine.Limiter: the same rules, key functions, overrides,
// request ids, seats, settlements, fail modes, shadow rules and telemetry
// as the gRPC and HTTP doors, on the same store, whichever protocol a
// client speaks (Connect, gRPC or gRPC-Web).
//
// A call is its procedure ("/pkg.Service/Method", what a gRPC interceptor
// sees as the full method), so one rule covers a service served by grpc-go
// and by connect-go. Key functions read the request headers as the gRPC
// door's metadata (a "-bin" header's base64 value decoded, as grpc-go
// decodes it) and the client address as the peer. A refused call fails
// with the code and the details the gRPC door sends (for a denial,
// connect.CodeResourceExhausted with errdetails.RetryInfo and
// errdetails.QuotaFailure), and its metadata carries the same rate-limit
// keys (ratelimit-policy, ratelimit, retry-after and the legacy
// x-ratelimit-*), so a Connect, a gRPC and a gRPC-Web client of the same
// handler all read one answer.
//
// It is a module of its own, so that the core module does not depend on
// connect-go.
package connectlimit

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/grpcstatus"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// New returns the connect.Interceptor that limits the calls of the
// handlers it is given to (connect.WithInterceptors) with l's rules: unary
// calls, and streams, whose messages PerMessage rules limit as they are
// received. Clients' calls (connect.WithInterceptors on a client) carry
// the criticality of their context in overload.Header, so that overload
// control sheds them downstream as the call that made them.
//
// An admitted call's handler runs with a context carrying its report for
// engine.ReportCost; once it returns (or panics) the call is ended: its
// seats released and its rules settled, Rule.Settle seeing the response
// message and the handler's error as a gRPC status of the same code.
func New(l *engine.Limiter) (connect.Interceptor, error) {
	if l == nil {
		return nil, errors.New("connectlimit: the Limiter is nil")
	}
	return &limiter{l: l}, nil
}

type limiter struct{ l *engine.Limiter }

// errPanicked is the error a call whose handler panicked is settled with.
var errPanicked = status.Error(codes.Internal, "connectlimit: the handler panicked")

// call presents a call of spec with header from peer to the engine. It is
// inlined where Begin is called, so that neither the call nor the Verdict
// is copied on the way: a handler's goroutine starts with a small stack.
func (i *limiter) call(spec connect.Spec, header http.Header, peer connect.Peer, req any) engine.Call {
	return engine.Call{
		Method:        spec.Procedure,
		Header:        keyfunc.HTTPHeader(header),
		Peer:          keyfunc.Addr(peer.Addr),
		Request:       req,
		Stream:        spec.StreamType != connect.StreamTypeUnary,
		QuietAdmitted: !i.l.AdmittedTrailers(),
	}
}

// WrapUnary limits a handler's unary calls.
func (i *limiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			sendCriticality(ctx, req.Header())
			return next(ctx, req)
		}
		v := i.l.Begin(ctx, i.call(req.Spec(), req.Header(), req.Peer(), req.Any()))
		if err := grpcstatus.Refusal(&v); err != nil {
			return nil, refusal(err, i.trailer(&v))
		}
		defer v.End(nil, errPanicked)
		resp, err := next(v.Context(), req)
		var msg any
		if resp != nil {
			msg = resp.Any()
			setAll(resp.Trailer(), i.trailer(&v))
		}
		v.End(msg, asStatus(err))
		return resp, err
	}
}

// WrapStreamingClient sends the criticality of a client stream's context.
func (i *limiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		sendCriticality(ctx, conn.RequestHeader())
		return conn
	}
}

// sendCriticality sets overload.Header on a client call's header to the
// criticality its context carries (overload.WithCriticality; a handler's
// context carries its own call's), unless the header names one already:
// a call is shed downstream as the call that made it.
func sendCriticality(ctx context.Context, h http.Header) {
	if c, ok := overload.CriticalityFrom(ctx); ok && h.Get(overload.Header) == "" {
		h.Set(overload.Header, c.String())
	}
}

// WrapStreamingHandler limits a handler's streams: one decision when the
// stream opens, then one per message received under PerMessage rules.
func (i *limiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		v := i.l.Begin(ctx, i.call(conn.Spec(), conn.RequestHeader(), conn.Peer(), nil))
		if err := grpcstatus.Refusal(&v); err != nil {
			return refusal(err, i.trailer(&v))
		}
		defer v.End(nil, errPanicked)
		err := next(v.Context(), &limitedConn{StreamingHandlerConn: conn, v: &v, ctx: ctx})
		setAll(conn.ResponseTrailer(), i.trailer(&v))
		v.End(nil, asStatus(err))
		return err
	}
}

// trailer is the rate-limit metadata of the call v decided, as the gRPC
// door sends it.
func (i *limiter) trailer(v *engine.Verdict) metadata.MD {
	return grpcstatus.Trailer(v, i.l.AdmittedTrailers())
}

// limitedConn decides every message it receives.
type limitedConn struct {
	connect.StreamingHandlerConn
	v   *engine.Verdict
	ctx context.Context
}

// Receive receives a message, then has it judged: a message that never
// arrives costs nothing.
func (c *limitedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	if c.v.Received(c.ctx) != nil {
		return refusal(grpcstatus.Refusal(c.v), nil)
	}
	return nil
}

// refusal is the connect error of a call refused with err, the gRPC status
// the gRPC door would answer: the same code (connect's codes are gRPC's),
// message and details, and md in its metadata.
func refusal(err error, md metadata.MD) *connect.Error {
	st := status.Convert(err)
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, a := range st.Proto().GetDetails() {
		m, err := a.UnmarshalNew()
		if err != nil {
			continue // a detail whose type is not linked in: the code and message still say it
		}
		if d, err := connect.NewErrorDetail(m); err == nil {
			ce.AddDetail(d)
		}
	}
	setAll(ce.Meta(), md)
	return ce
}

// asStatus returns a handler's error as a gRPC status of the same code,
// which Rule.Settle reads (interceptor.SettleFailures).
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.Code(connect.CodeOf(err)), err.Error())
}

// setAll sets every key of md in h.
func setAll(h http.Header, md metadata.MD) {
	for k, vs := range md {
		h[http.CanonicalHeaderKey(k)] = vs
	}
}
