package interceptor

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
)

// Limiter is an engine.Limiter with the gRPC server interceptors. The
// engine's methods (Peek, SetRules, SetOverride, Close, …) are its own;
// give its engine (the Limiter field) to package httplimit and the
// connectlimit module so that every door shares one quota.
type Limiter struct {
	*engine.Limiter
}

// New returns a Limiter that asks st for decisions, configured as
// engine.New configures one: every engine.Option applies.
func New(st tollgate.Store, opts ...Option) (*Limiter, error) {
	l, err := engine.New(st, opts...)
	if err != nil {
		return nil, err
	}
	return &Limiter{Limiter: l}, nil
}

// The engine's names that v1 code of this package was written with: each
// is the engine's own (an alias, or a function returning what the
// engine's returns), so that code keeps compiling; new code may write
// either.
type (
	// Option is an engine.Option.
	Option = engine.Option
	// Rule is an engine.Rule.
	Rule = engine.Rule
	// FailMode is an engine.FailMode.
	FailMode = engine.FailMode
	// InFlight is an engine.InFlight.
	InFlight = engine.InFlight
	// Caller is an engine.Caller.
	Caller = engine.Caller
)

var (
	// FailOpen is engine.FailOpen.
	FailOpen = engine.FailOpen
	// FailClosed is engine.FailClosed.
	FailClosed = engine.FailClosed
)

// WithRules is engine.WithRules.
func WithRules(rules ...Rule) Option { return engine.WithRules(rules...) }

// WithStoreTimeout is engine.WithStoreTimeout.
func WithStoreTimeout(d time.Duration) Option { return engine.WithStoreTimeout(d) }

// WithAdmittedTrailers is engine.WithAdmittedTrailers.
func WithAdmittedTrailers() Option { return engine.WithAdmittedTrailers() }

// Fixed is engine.Fixed.
func Fixed(limits ...tollgate.Limit) engine.Limits { return engine.Fixed(limits...) }

// ReportCost is engine.ReportCost.
func ReportCost(ctx context.Context, n int64) { engine.ReportCost(ctx, n) }

// SettleReported is engine.SettleReported.
func SettleReported(ctx context.Context, resp any, err error) (int64, bool) {
	return engine.SettleReported(ctx, resp, err)
}
