// Package storecall is how package interceptor and package rls call their
// shared store: each call under its own short deadline and behind a circuit
// breaker, its error sorted by what it says about the store (Result); what
// a rule or a descriptor does when the store cannot decide (FailMode); and
// the names both record decisions and store latency under, so that one
// dashboard shows the edge and the services.
package storecall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/breaker"
)

// ErrBreakerOpen is the cause recorded for a call the breaker kept from the
// store.
var ErrBreakerOpen = errors.New("circuit breaker open: the store failed repeatedly and is not asked until the cool-down passes")

// The defaults of Config, which package interceptor and package rls give
// their users as their own (interceptor.DefaultStoreTimeout,
// rls.DefaultStoreTimeout, ...).
const (
	// DefaultTimeout is how long one store call may take before the fail
	// mode applies. It is short on purpose: a decision on a healthy Redis
	// takes well under a millisecond, and a hung Redis must not hang every
	// request.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultBreakerFailures consecutive store failures open the breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerCoolDown is how long the open breaker keeps calls from
	// the store before one probes it.
	DefaultBreakerCoolDown = time.Second
)

// Config is a Policy's settings. Its defaults are those of the packages
// that take it (DefaultTimeout, ...), given by value.
type Config struct {
	// Timeout bounds each call (> 0).
	Timeout time.Duration
	// BreakerFailures consecutive failures open the breaker (0 disables
	// it); it then stays open for BreakerCoolDown (> 0) before one call
	// probes the store.
	BreakerFailures int
	BreakerCoolDown time.Duration
}

// Policy calls one store: every caller of that store shares its breaker.
// It is safe for concurrent use.
type Policy struct {
	timeout time.Duration
	// deadline: calls get their own deadline. A tollgate.InProcess store
	// (store.Memory) never waits; a deadline's context and timer would be
	// pure cost (interceptor's BenchmarkUnaryAdmit).
	deadline bool
	breaker  *breaker.Breaker
}

// WithDefaults gives c's zero fields their defaults, as engine.Config and
// rls.Options read them: a zero Timeout is DefaultTimeout, a zero
// BreakerFailures or BreakerCoolDown DefaultBreakerFailures or
// DefaultBreakerCoolDown, and a negative BreakerFailures turns the breaker
// off.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.BreakerFailures < 0:
		c.BreakerFailures, c.BreakerCoolDown = 0, 0
		return c
	case c.BreakerFailures == 0:
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerCoolDown == 0 {
		c.BreakerCoolDown = DefaultBreakerCoolDown
	}
	return c
}

// New returns the policy for calling st. An invalid setting is an error
// naming it.
func New(st tollgate.Store, c Config) (*Policy, error) {
	switch {
	case c.Timeout <= 0:
		return nil, fmt.Errorf("store timeout must be > 0, got %s", c.Timeout)
	case c.BreakerFailures < 0:
		return nil, fmt.Errorf("breaker failures must be >= 0, got %d", c.BreakerFailures)
	case c.BreakerFailures > 0 && c.BreakerCoolDown <= 0:
		return nil, fmt.Errorf("breaker cool-down must be > 0, got %s", c.BreakerCoolDown)
	}
	ip, ok := st.(tollgate.InProcess)
	inProcess := ok && ip.DecidesInProcess()
	return &Policy{timeout: c.Timeout, deadline: !inProcess, breaker: breaker.New(c.BreakerFailures, c.BreakerCoolDown)}, nil
}

// Result is what one store call says about the store.
type Result uint8

const (
	// Decided: the store answered.
	Decided Result = iota
	// Invalid: the store refused the request (tollgate.ErrInvalidRequest),
	// one the caller's own checks let through. The store is fine.
	Invalid
	// Canceled: the caller's context ended first, which says nothing about
	// the store.
	Canceled
	// Failed: the store erred or passed its deadline; the fail mode applies.
	Failed
	// Unasked: the breaker kept the call from the store; the fail mode
	// applies.
	Unasked
)

// Measured reports whether the call's latency is the store's, recorded in
// MetricStoreDuration: the store answered or failed. A refused request, a
// caller gone first and a call the breaker kept are not.
func (r Result) Measured() bool { return r == Decided || r == Failed }

// Call is one store call, from Policy.Open to End.
type Call struct {
	// Ctx is the context to call the store with: the caller's, under the
	// store's deadline.
	Ctx context.Context
	// Start is when the call began: the base of its deadline and its
	// latency, for a caller that needs the time too.
	Start time.Time

	caller  context.Context
	cancel  context.CancelFunc
	breaker *breaker.Breaker
	ticket  breaker.Ticket
}

// Open starts a store call under ctx. It returns false when the breaker
// keeps the call from the store: then the store is not called, End is not
// either, and the fail mode applies with the cause ErrBreakerOpen.
func (p *Policy) Open(ctx context.Context) (Call, bool) {
	ticket, ok := p.breaker.Allow()
	if !ok {
		return Call{}, false
	}
	c := Call{Ctx: ctx, Start: time.Now(), caller: ctx, breaker: p.breaker, ticket: ticket}
	if p.deadline {
		c.Ctx, c.cancel = context.WithDeadline(ctx, c.Start.Add(p.timeout))
	}
	return c, true
}

// End finishes the call with the store's error: it releases the call's
// deadline, tells the breaker what the error says about the store, and
// returns that and the call's latency.
func (c *Call) End(err error) (Result, time.Duration) {
	elapsed := time.Since(c.Start)
	if c.cancel != nil {
		c.cancel()
	}
	r := classify(c.caller, err)
	switch r {
	case Decided:
		c.breaker.Done(c.ticket, breaker.OK)
	case Failed:
		c.breaker.Done(c.ticket, breaker.Failed)
	default:
		c.breaker.Done(c.ticket, breaker.NoNews)
	}
	return r, elapsed
}

// classify sorts a store call's error: tollgate.ErrInvalidRequest is the
// request's fault, the end of the caller's own context is no news, and
// anything else is a store failure.
func classify(caller context.Context, err error) Result {
	switch {
	case err == nil:
		return Decided
	case errors.Is(err, tollgate.ErrInvalidRequest):
		return Invalid
	case caller.Err() != nil:
		return Canceled
	}
	return Failed
}

// Do makes call one store call: Open, call(c.Ctx), End. When the breaker
// keeps the call from the store, call is not run and Do returns Unasked and
// ErrBreakerOpen.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) (Result, time.Duration, error) {
	c, ok := p.Open(ctx)
	if !ok {
		return Unasked, 0, ErrBreakerOpen
	}
	err := call(c.Ctx)
	r, elapsed := c.End(err)
	return r, elapsed, err
}
