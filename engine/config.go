package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
	argcheck "github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/overload"
)

// Config configures a Limiter. Its zero value is the default of every
// setting, each field saying what its zero means; New reports a setting out
// of range, naming it.
type Config struct {
	// Rules apply to every call whose method or route their Methods match,
	// unless another matching rule replaces them (Rule.Replaces); calls no
	// rule matches are not limited. SetRules replaces them.
	Rules []Rule
	// RequestIDHeader is the header (metadata key) the request id is read
	// from; "" means "x-request-id". Retries carrying the same id are not
	// debited twice.
	RequestIDHeader string
	// StoreTimeout bounds one store decision; 0 means 50ms, short on
	// purpose: a decision on a healthy Redis takes well under a
	// millisecond, and a hung Redis must not hang every call. The store
	// call gets its own deadline derived from the call's context, so it
	// never outlives the call; past it the rule's FailMode applies. A store
	// that decides in process (store.Memory, tollgate.InProcess) is called
	// under the call's context alone.
	//
	// The store must honour its context's deadline. store.Redis does,
	// whatever its go-redis client's settings; ContextTimeoutEnabled: true
	// on the client is still recommended, so that a hung connection is also
	// released at the deadline rather than after the client's ReadTimeout.
	StoreTimeout time.Duration
	// BreakerFailures consecutive store failures (errors or timeouts, not
	// denials and not cancelled calls) open the circuit breaker for
	// BreakerCoolDown, during which every rule goes straight to its
	// FailMode without waiting on the store; then one call probes the
	// store, and its success closes the breaker. Failures are consecutive
	// in time: calls that fail together on one stall of the store count
	// once. 0 means 5 failures and 1s; a negative BreakerFailures turns the
	// breaker off.
	BreakerFailures int
	BreakerCoolDown time.Duration
	// Replicas is how many replicas share the store: FailLocal rules (not
	// FailLocalAt) cap each replica at their limits divided by it (Rate and
	// Burst rounded up), so the fleet stays near its quota while the store
	// is down. 0 means 1.
	Replicas int
	// LocalStore is the in-process store FailLocal rules decide in while
	// the shared store cannot: a store.Memory of its own, not shared with
	// another Limiter or used as a shared store. New refuses a FailLocal
	// rule without one.
	LocalStore tollgate.Store
	// TracerProvider and MeterProvider receive the decisions' spans and
	// metrics; nil means otel's global providers.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Logger receives what the Limiter cannot return to a caller: a
	// settlement the store could not take (Rule.Settle), a seat it could
	// not release (Rule.InFlight). nil means slog.Default().
	Logger *slog.Logger
	// SeatTimeout is how long an in-flight seat (Rule.InFlight) lives when
	// its call has no deadline, and between a stream's renewals, for rules
	// whose InFlight.SeatTimeout is 0; 0 means 30s. A replica that dies
	// holding seats holds them at most this long.
	SeatTimeout time.Duration
	// OverrideRefresh is how old the Limiter's view of the overrides may
	// be when a call is decided; 0 means 1s. A call that finds it older
	// waits for the store's version, one short round trip shared by the
	// calls waiting, within the store deadline; if the store cannot say,
	// the rule's FailMode decides. Changes the store announces
	// (tollgate.OverrideWatcher) apply within a round trip.
	OverrideRefresh time.Duration
	// Clock is the time the Limiter reads for its own decisions, as
	// store.WithClock is the Memory store's: when an in-flight seat was
	// taken and how long it was held, how old its view of the overrides is
	// and whether one expired, and when end-of-call work the store failed
	// is retried or dropped. nil means time.Now. Deadlines stay those of
	// the calls' contexts.
	Clock func() time.Time
	// AdmittedTrailers makes the RPC doors (package interceptor, the
	// connectlimit module) send the rate-limit trailers on admitted calls
	// too; by default only refusals carry them, as Envoy's rate limit
	// filter does unless asked: built, copied, encoded and decoded on every
	// admitted call, they cut a limited gRPC server's calls per second by
	// 15–20% (docs/performance.md#grpc). An admitted retry that was not
	// debited again says so either way. Package httplimit sends its fields
	// on every response whatever this says (httplimit.WithoutRateLimitFields).
	AdmittedTrailers bool
	// Refused configures the counting of the identities the rules refuse,
	// for Limiter.TopRefused; its zero value counts them.
	Refused RefusedConfig
	// Overload, when set, protects the server itself: every call through
	// every door first takes a seat under an adaptive concurrency limit,
	// waiting in a room ordered by criticality and tenant, or is shed
	// (Kind Shed) before its rules are asked. nil means none.
	// docs/overload.md.
	Overload *overload.Options

	// timers replaces the real clock's timers (internal/enginehooks).
	timers func(d time.Duration, f func()) timer
}

// settings are a Config with its defaults applied and checked.
type settings struct {
	Config
	header  string // RequestIDHeader, lower-case
	breaker storecall.Config
	clock   clock
}

// settle applies c's defaults and checks every setting.
func (c Config) settle() (settings, error) {
	s := settings{Config: c}
	if s.RequestIDHeader == "" {
		s.RequestIDHeader = "x-request-id"
	}
	if err := validateHeader(s.RequestIDHeader); err != nil {
		return s, err
	}
	s.header = s.RequestIDHeader
	s.breaker = storecall.Config{Timeout: c.StoreTimeout, BreakerFailures: c.BreakerFailures, BreakerCoolDown: c.BreakerCoolDown}
	switch {
	case c.StoreTimeout == 0:
		s.breaker.Timeout, s.StoreTimeout = storecall.DefaultTimeout, storecall.DefaultTimeout
	case c.StoreTimeout < 0:
		return s, fmt.Errorf("engine: StoreTimeout must be >= 0, got %s", c.StoreTimeout)
	}
	switch {
	case c.BreakerFailures == 0 && c.BreakerCoolDown == 0:
		s.breaker.BreakerFailures, s.breaker.BreakerCoolDown = storecall.DefaultBreakerFailures, storecall.DefaultBreakerCoolDown
	case c.BreakerFailures == 0:
		s.breaker.BreakerFailures = storecall.DefaultBreakerFailures
	case c.BreakerFailures < 0:
		s.breaker.BreakerFailures, s.breaker.BreakerCoolDown = 0, 0
	case c.BreakerCoolDown == 0:
		s.breaker.BreakerCoolDown = storecall.DefaultBreakerCoolDown
	}
	if c.BreakerCoolDown < 0 {
		return s, fmt.Errorf("engine: BreakerCoolDown must be >= 0, got %s", c.BreakerCoolDown)
	}
	switch {
	case c.Replicas < 0:
		return s, fmt.Errorf("engine: Replicas must be >= 0, got %d", c.Replicas)
	case c.Replicas == 0:
		s.Replicas = 1
	}
	if c.LocalStore != nil && argcheck.Nil(c.LocalStore) {
		return s, errors.New("engine: the LocalStore is a nil pointer")
	}
	switch {
	case c.SeatTimeout < 0:
		return s, fmt.Errorf("engine: SeatTimeout must be >= 0, got %s", c.SeatTimeout)
	case c.SeatTimeout == 0:
		s.SeatTimeout = defaultSeatTimeout
	}
	switch {
	case c.OverrideRefresh < 0:
		return s, fmt.Errorf("engine: OverrideRefresh must be >= 0, got %s", c.OverrideRefresh)
	case c.OverrideRefresh == 0:
		s.OverrideRefresh = defaultOverrideRefresh
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.clock = realClock()
	if c.Clock != nil {
		s.clock.now = c.Clock
	}
	if c.timers != nil {
		s.clock.afterFunc = c.timers
	}
	return s, nil
}

// The defaults of the settings whose zero means a duration.
const (
	defaultSeatTimeout     = 30 * time.Second
	defaultOverrideRefresh = time.Second
)

// validateHeader accepts what gRPC accepts as a metadata key that is not
// binary and not reserved.
func validateHeader(h string) error {
	if strings.HasPrefix(h, "grpc-") || strings.HasSuffix(h, "-bin") {
		return fmt.Errorf("engine: RequestIDHeader %q is reserved by gRPC or binary", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("engine: RequestIDHeader %q: metadata keys are lower-case letters, digits, '-', '_' and '.'", h)
		}
	}
	return nil
}
