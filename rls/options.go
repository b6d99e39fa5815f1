package rls

import (
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/internal/storecall"
)

// StoreFailAnswer is what the server answers when the store cannot decide
// (an error, its deadline passed, or the breaker is open). The zero value,
// AnswerUnavailable, is the default. It is not package interceptor's
// FailMode: the edge has no local cap to fall back to, and its default is
// envoyproxy/ratelimit's.
type StoreFailAnswer uint8

const (
	// AnswerUnavailable returns codes.Unavailable, so that Envoy's own
	// failure_mode_deny decides: by default Envoy lets the request through,
	// with failure_mode_deny: true it refuses it. This is what
	// envoyproxy/ratelimit does when Redis fails, and the default.
	AnswerUnavailable StoreFailAnswer = iota
	// AnswerOK answers OK, with each limited descriptor's current_limit and
	// no remaining count.
	AnswerOK
)

// String returns "unavailable" or "ok".
func (a StoreFailAnswer) String() string {
	switch a {
	case AnswerUnavailable:
		return "unavailable"
	case AnswerOK:
		return "ok"
	}
	return "storefailanswer(" + strconv.Itoa(int(a)) + ")"
}

// Defaults of WithStoreTimeout and WithBreaker, the same as package
// interceptor's.
const (
	// defaultStoreTimeout is how long one store call may take before the
	// fail mode applies (50ms).
	defaultStoreTimeout = storecall.DefaultTimeout
	// defaultBreakerFailures consecutive store failures open the breaker (5).
	defaultBreakerFailures = storecall.DefaultBreakerFailures
	// defaultBreakerCoolDown is how long the open breaker keeps calls from
	// the store before one probes it (1s).
	defaultBreakerCoolDown = storecall.DefaultBreakerCoolDown
)

// Default header names of WithResponseHeaders: the names Envoy's rate limit
// filter and package interceptor use.
const (
	defaultLimitHeader     = "x-ratelimit-limit"
	defaultRemainingHeader = "x-ratelimit-remaining"
	defaultResetHeader     = "x-ratelimit-reset"
)

// Option configures a Server.
type Option func(*options)

type options struct {
	config         *Config
	storeFail      StoreFailAnswer
	storeCalls     storecall.Config
	headers        bool
	headerNames    [3]string
	shadow         bool
	quota          bool
	countOver      bool
	metadata       bool
	hits           *hitCounter
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
}

func defaultOptions() options {
	return options{
		storeCalls:  storecall.Config{Timeout: defaultStoreTimeout, BreakerFailures: defaultBreakerFailures, BreakerCoolDown: defaultBreakerCoolDown},
		headerNames: [3]string{defaultLimitHeader, defaultRemainingHeader, defaultResetHeader},
	}
}

// WithConfig sets the configuration the server starts with. Without it the
// server knows no domain and answers OK to every request until SetConfig.
func WithConfig(c *Config) Option {
	return func(o *options) { o.config = c }
}

// WithStoreFailAnswer sets what the server answers when the store cannot
// decide: AnswerUnavailable (the default) or AnswerOK.
func WithStoreFailAnswer(a StoreFailAnswer) Option {
	return func(o *options) { o.storeFail = a }
}

// WithStoreTimeout bounds each store call (default 50ms);
// past it the fail mode applies. store.Memory, which decides in process and
// never waits, is called under the request's context alone. Envoy's
// own timeout for the rate limit service is 20ms by default: keep this
// below it, or raise Envoy's.
func WithStoreTimeout(d time.Duration) Option {
	return func(o *options) { o.storeCalls.Timeout = d }
}

// WithBreaker configures the circuit breaker in front of the store, as
// interceptor.WithBreaker does: after failures consecutive store failures
// no call waits on the store for coolDown, then one call probes it.
// failures 0 disables it. The defaults are 5 failures and
// 1s.
func WithBreaker(failures int, coolDown time.Duration) Option {
	return func(o *options) { o.storeCalls.BreakerFailures, o.storeCalls.BreakerCoolDown = failures, coolDown }
}

// WithResponseHeaders makes every response carry response_headers_to_add
// with the limit, the remaining count and the seconds until reset of the
// descriptor closest to its limit (an over-limit one if any), as
// envoyproxy/ratelimit does with LIMIT_RESPONSE_HEADERS_ENABLED. Empty
// names keep the defaults (x-ratelimit-limit, x-ratelimit-remaining,
// x-ratelimit-reset); that project's own defaults are RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset.
func WithResponseHeaders(limit, remaining, reset string) Option {
	return func(o *options) {
		o.headers = true
		for i, name := range [3]string{limit, remaining, reset} {
			if name != "" {
				o.headerNames[i] = name
			}
		}
	}
}

// WithShadow puts every descriptor in shadow mode, as
// envoyproxy/ratelimit's SHADOW_MODE does (and interceptor.WithShadow every
// rule): requests are decided and debited as usual, but the overall code is
// always OK. Decisions that would have refused a request are counted with
// tollgate.outcome "shadow_denied".
func WithShadow() Option {
	return func(o *options) { o.shadow = true }
}

// WithQuotaMode puts every limited descriptor in quota mode, as
// envoyproxy/ratelimit's QUOTA_MODE does (a descriptor's quota_mode: true
// does it for one): a descriptor over its limit is answered OK with its
// limit and what remains (nothing), never refuses the request, and is named
// in the response's dynamic metadata (WithDynamicMetadata).
func WithQuotaMode() Option {
	return func(o *options) { o.quota = true }
}

// WithCountOverLimit counts every descriptor's hits even over its limit,
// each descriptor on its own, as envoyproxy/ratelimit counts them (its
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, the default), and as a
// configuration file's count_over_limit does for its domain: answers are
// then envoyproxy/ratelimit's, request after request. Without it a refused
// request debits none of its descriptors.
func WithCountOverLimit() Option {
	return func(o *options) { o.countOver = true }
}

// WithDynamicMetadata makes every answer carry dynamic_metadata as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain, the
// descriptors' entries ("key=value") and hits_addend, quotaModeEnabled and,
// when a quota-mode descriptor is over its limit, quotaModeViolations (the
// indexes of those descriptors).
func WithDynamicMetadata() Option {
	return func(o *options) { o.metadata = true }
}

// WithHitCounts calls record after every decided request with each
// limited descriptor's HitCounts, split as envoyproxy/ratelimit's
// statistics split hits: a hit is near the limit above ⌊nearRatio·limit⌋
// (that project's NEAR_LIMIT_RATIO, 0.8 by default). record is called on
// the request's goroutine: it must be quick and safe for concurrent use.
func WithHitCounts(nearRatio float32, record func(HitCounts)) Option {
	return func(o *options) { o.hits = &hitCounter{ratio: nearRatio, record: record} }
}

// WithTracerProvider sets where spans go (default the global provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithMeterProvider sets where metrics go (default the global provider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meterProvider = mp }
}
