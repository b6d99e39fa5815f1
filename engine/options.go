package engine

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/internal/storecall"
)

// Defaults of WithStoreTimeout and WithBreaker, the same as package rls's.
const (
	// DefaultStoreTimeout is how long one store decision may take before the
	// rule's FailMode applies (50ms). It is short on purpose: a decision on
	// a healthy Redis takes well under a millisecond, and a hung Redis must
	// not hang every RPC.
	DefaultStoreTimeout = storecall.DefaultTimeout
	// DefaultBreakerFailures consecutive store failures open the circuit
	// breaker (5).
	DefaultBreakerFailures = storecall.DefaultBreakerFailures
	// DefaultBreakerCoolDown is how long the open breaker keeps calls from
	// the store before one probes it (1s).
	DefaultBreakerCoolDown = storecall.DefaultBreakerCoolDown
)

// Option configures a Limiter.
type Option func(*config)

type config struct {
	rules            []Rule
	requestIDHeader  string
	storeTimeout     time.Duration
	breakerFailures  int
	breakerCoolDown  time.Duration
	replicas         int64
	local            tollgate.Store
	shadow           bool
	admittedTrailers bool
	tracerProvider   trace.TracerProvider
	meterProvider    metric.MeterProvider
	logger           *slog.Logger
	seatTimeout      time.Duration
	overrideRefresh  time.Duration
	clock            clock
}

func defaultConfig() config {
	return config{
		requestIDHeader: idempotency.DefaultHeader,
		storeTimeout:    DefaultStoreTimeout,
		breakerFailures: DefaultBreakerFailures,
		breakerCoolDown: DefaultBreakerCoolDown,
		replicas:        1,
		seatTimeout:     DefaultSeatTimeout,
		overrideRefresh: DefaultOverrideRefresh,
		clock:           realClock(),
	}
}

// WithRules appends rules. Every rule whose Methods match a call applies to
// it, unless another matching rule replaces it (Rule.Replaces); calls no
// rule matches are not limited.
func WithRules(rules ...Rule) Option {
	return func(c *config) { c.rules = append(c.rules, rules...) }
}

// WithRequestIDHeader sets the metadata key the request id is read from
// (default idempotency.DefaultHeader). Retries carrying the same id are not
// debited twice.
func WithRequestIDHeader(header string) Option {
	return func(c *config) { c.requestIDHeader = header }
}

// WithStoreTimeout bounds one store decision (default DefaultStoreTimeout).
// The store call gets its own deadline derived from the call's context, so
// it never outlives the call; past it the rule's FailMode applies.
// store.Memory, which decides in process and never waits, is called under
// the call's context alone.
//
// The store must honour its context's deadline. store.Redis does, whatever
// its go-redis client's settings; ContextTimeoutEnabled: true on the client
// is still recommended, so that a hung connection is also released at the
// deadline rather than after the client's ReadTimeout.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.storeTimeout = d }
}

// WithBreaker configures the circuit breaker in front of the store: after
// failures consecutive store failures (errors or timeouts, not denials and
// not cancelled calls) it opens for coolDown, during which every rule goes
// straight to its FailMode without waiting on the store. Then one call
// probes the store; its success closes the breaker, its failure opens it
// for another coolDown. failures 0 disables the breaker.
func WithBreaker(failures int, coolDown time.Duration) Option {
	return func(c *config) { c.breakerFailures, c.breakerCoolDown = failures, coolDown }
}

// WithReplicas says how many replicas share the store. FailLocal rules
// (not FailLocalAt) then cap each replica at their limits divided by n
// (Rate and Burst rounded up), so the fleet stays near its quota while the
// store is down. The default is 1.
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas = int64(n) }
}

// WithLocalStore sets the in-process store FailLocal rules decide in while
// the shared store cannot: a store.Memory of its own, not shared with
// another Limiter or used as a shared store. New refuses a FailLocal rule
// without one.
func WithLocalStore(st tollgate.Store) Option {
	return func(c *config) { c.local = st }
}

// WithTracerProvider sets where decision spans go (default the global
// otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets where decision metrics go (default the global
// otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithShadow puts every rule in shadow (see Rule.Shadow): decisions are made
// and debited as usual, all or nothing as if enforced, but a denial never
// refuses a call; it is recorded as outcome "shadow_denied".
func WithShadow() Option {
	return func(c *config) { c.shadow = true }
}

// WithAdmittedTrailers sends the x-ratelimit-limit, x-ratelimit-remaining
// and x-ratelimit-reset trailers on admitted calls too. By default only
// denials carry them (with retry-after and grpc-retry-pushback-ms), as
// Envoy's rate limit filter does unless asked: built, copied, encoded and
// decoded on every admitted call, they cost it 21 allocations across client
// and server and cut a limited server's calls per second by 15–20%
// (docs/performance.md#grpc). An admitted retry that was not debited
// again carries x-ratelimit-replayed either way.
func WithAdmittedTrailers() Option {
	return func(c *config) { c.admittedTrailers = true }
}

// WithLogger sets where the Limiter logs what it cannot return to a caller:
// a settlement the store could not take (Rule.Settle), a seat it could not
// release (Rule.InFlight). The default is slog.Default().
func WithLogger(log *slog.Logger) Option {
	return func(c *config) { c.logger = log }
}

// WithSeatTimeout sets how long an in-flight seat (Rule.InFlight) lives
// when its call has no deadline, and between a stream's renewals, for rules
// whose SeatTimeout is 0 (default DefaultSeatTimeout). A replica that dies
// holding seats holds them at most this long.
func WithSeatTimeout(d time.Duration) Option {
	return func(c *config) { c.seatTimeout = d }
}

// WithOverrideRefresh sets how old the Limiter's view of the overrides may
// be when a call is decided (default DefaultOverrideRefresh). A call that
// finds it older waits for the store's version, one short round trip shared
// by the calls waiting, within the store deadline; if the store cannot say,
// the rule's FailMode decides. Changes the store announces apply sooner.
func WithOverrideRefresh(d time.Duration) Option {
	return func(c *config) { c.overrideRefresh = d }
}

// WithClock sets the time the Limiter reads for its own decisions (default
// time.Now), as store.WithClock does for the Memory store: when an
// in-flight seat was taken and how long it was held, how old its view of
// the overrides is and whether one expired, and when end-of-call work the
// store failed is retried or dropped. Give both the same clock in tests.
// Deadlines stay those of the calls' contexts.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock.now = now }
}
