package interceptor

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/overload"
)

// Limiter is the gRPC door of an engine.Limiter: the engine's methods
// (Peek, SetRules, SetOverride, Close, …; those answering operators return
// gRPC statuses here) and the server interceptors. Give its engine (the
// Limiter field) to package httplimit and the connectlimit module, so that
// every door of a server shares one quota.
type Limiter struct {
	*engine.Limiter
}

// Option changes the engine.Config New builds its engine from: WithRules,
// WithStoreTimeout, WithAdmittedTrailers and WithOverload, or any function setting a
// field (func(c *engine.Config) { c.Replicas = 4 }).
type Option func(*engine.Config)

// New returns the gRPC door of a new engine.Limiter that asks st for
// decisions, configured by opts as engine.New configures one.
func New(st tollgate.Store, opts ...Option) (*Limiter, error) {
	var c engine.Config
	for _, o := range opts {
		o(&c)
	}
	l, err := engine.New(st, c)
	if err != nil {
		return nil, err
	}
	return For(l), nil
}

// For returns the gRPC door of l, an engine built with engine.New.
func For(l *engine.Limiter) *Limiter { return &Limiter{Limiter: l} }

// WithRules appends rules to engine.Config.Rules.
func WithRules(rules ...Rule) Option {
	return func(c *engine.Config) { c.Rules = append(c.Rules, rules...) }
}

// WithStoreTimeout sets engine.Config.StoreTimeout: how long one store
// decision may take before the rule's FailMode applies.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *engine.Config) { c.StoreTimeout = d }
}

// WithAdmittedTrailers sets engine.Config.AdmittedTrailers: admitted calls
// carry the rate-limit trailers too, not only refused ones.
func WithAdmittedTrailers() Option {
	return func(c *engine.Config) { c.AdmittedTrailers = true }
}

// WithOverload sets engine.Config.Overload: every call, through every door
// of the engine, first takes a seat under an adaptive concurrency limit or
// is shed (codes.Unavailable with RetryInfo and grpc-retry-pushback-ms).
// docs/overload.md.
func WithOverload(o overload.Options) Option {
	return func(c *engine.Config) { c.Overload = &o }
}

// The engine's names that v1 code of this package is written with: each
// is the engine's own, so that such code keeps compiling.
type (
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

// Fixed is engine.Fixed.
func Fixed(limits ...tollgate.Limit) engine.Limits { return engine.Fixed(limits...) }

// ReportCost is engine.ReportCost.
func ReportCost(ctx context.Context, n int64) { engine.ReportCost(ctx, n) }

// SettleReported is engine.SettleReported.
func SettleReported(ctx context.Context, resp any, err error) (int64, bool) {
	return engine.SettleReported(ctx, resp, err)
}
