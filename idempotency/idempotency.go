// Package idempotency carries a request id from gRPC clients to the rate
// limiter so that every retry attempt of one logical call is debited once.
//
// On the client, UnaryClientInterceptor and StreamClientInterceptor stamp a
// fresh id on each logical call that has none, in the metadata key
// DefaultHeader. On the server, the engine reads it from the call's
// metadata or headers on every door (engine.Config.RequestIDHeader) and
// passes it to the store as tollgate.Request.RequestID: once a call with an
// id is admitted, later attempts with the same id are admitted again without
// a debit (a bounded number of times, for a bounded period; see the store).
// An id that is not a valid tollgate.Request.RequestID (at most
// tollgate.MaxRequestIDLen bytes of printable ASCII without spaces), or a
// header sent several times with different values, refuses the call as
// invalid: a proxy that appends its own id must not silently decide which
// attempts share a debit.
//
// # Interceptor order
//
// gRPC runs client interceptors once per logical call, before its built-in
// retry machinery (the service config's retryPolicy, and hedging): every
// attempt of a call stamped by these interceptors carries the same id, and
// nothing else is needed. An interceptor that retries by calling the invoker
// again, such as go-grpc-middleware's retry interceptor, must be chained
// after this package's, so that it retries inside the stamped call:
//
//	grpc.WithChainUnaryInterceptor(
//		idempotency.UnaryClientInterceptor(), // first: outermost, once per logical call
//		retry.UnaryClientInterceptor(...),    // then: each attempt reuses the id
//	)
//
// Chained the other way round, each attempt would get its own id and be
// debited as a new call.
//
// A caller that retries on its own, above gRPC (a job re-run, a message
// redelivered), sets the id itself so that all its tries share it:
//
//	ctx = metadata.AppendToOutgoingContext(ctx, idempotency.DefaultHeader, id)
//
// and the interceptors leave an id already present untouched.
package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/tollgate/tollgate/internal/check"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// DefaultHeader is the metadata key that carries the request id.
const DefaultHeader = "x-request-id"

// NewID returns a new random request id: 128 bits from crypto/rand, in 32
// lower-case hexadecimal digits. It is the default generator of the client
// interceptors, and what a caller that sets ids itself should use.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// Option configures the client interceptors.
type Option func(*options)

type options struct {
	header   string
	generate func() string
}

// WithHeader sets the metadata key the id is sent under; the default is
// DefaultHeader. The server must read the same key.
func WithHeader(header string) Option {
	return func(o *options) { o.header = strings.ToLower(header) }
}

// WithGenerator sets the function that makes a new id for each logical
// call; the default is NewID. Its ids must be unique per call and valid
// as a tollgate.Request.RequestID; a call for which it returns an invalid
// id fails with codes.Internal before anything is sent.
func WithGenerator(generate func() string) Option {
	return func(o *options) { o.generate = generate }
}

func newOptions(opts []Option) options {
	o := options{header: DefaultHeader, generate: NewID}
	for _, opt := range opts {
		opt(&o)
	}
	if o.header == "" {
		o.header = DefaultHeader
	}
	if o.generate == nil {
		o.generate = NewID
	}
	return o
}

// stamp returns ctx with a new id in its outgoing metadata, or ctx itself
// when the caller already set one.
func (o options) stamp(ctx context.Context) (context.Context, error) {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(o.header)) > 0 {
		return ctx, nil
	}
	id := o.generate()
	if id == "" {
		return nil, status.Error(codes.Internal, "idempotency: the id generator returned an empty id")
	}
	if err := check.RequestID(id); err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: the id generator returned an unusable id: %v", err)
	}
	return metadata.AppendToOutgoingContext(ctx, o.header, id), nil
}

// UnaryClientInterceptor returns a client interceptor that gives each unary
// call without a request id a new one, which every retry attempt of the call
// carries. See the package documentation for where to chain it.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	o := newOptions(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ctx, err := o.stamp(ctx)
		if err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor returns a client interceptor that gives each
// stream without a request id a new one, which every retry attempt of the
// stream carries. See the package documentation for where to chain it.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	o := newOptions(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, err := o.stamp(ctx)
		if err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, callOpts...)
	}
}
