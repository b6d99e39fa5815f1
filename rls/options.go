package rls

import (
	"cmp"
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

// defaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
const defaultNearLimitRatio = 0.8

// Default header names of Options.ResponseHeaders: the names Envoy's rate
// limit filter and package interceptor use.
const (
	defaultLimitHeader     = "x-ratelimit-limit"
	defaultRemainingHeader = "x-ratelimit-remaining"
	defaultResetHeader     = "x-ratelimit-reset"
)

// Options configures a Server. The zero value is every default: no domain
// until SetConfig, AnswerUnavailable when the store cannot decide, 50ms
// store calls behind a breaker, no response headers, no shadow or quota
// mode, and the global OpenTelemetry providers.
type Options struct {
	// Config is the configuration the server starts with. Without it the
	// server knows no domain and answers OK to every request until
	// SetConfig.
	Config *Config
	// StoreFailAnswer is what the server answers when the store cannot
	// decide: AnswerUnavailable (the zero value) or AnswerOK.
	StoreFailAnswer StoreFailAnswer
	// StoreTimeout bounds each store call; 0 means 50ms, and past it the
	// fail answer applies. store.Memory, which decides in process and
	// never waits, is called under the request's context alone. Envoy's
	// own timeout for the rate limit service is 20ms by default: keep this
	// below it, or raise Envoy's.
	StoreTimeout time.Duration
	// BreakerFailures consecutive store failures open the circuit breaker
	// in front of the store, as engine.Config's does: no call waits on the
	// store for BreakerCoolDown, then one call probes it. 0 means 5
	// failures and 1s; a negative BreakerFailures turns the breaker off.
	BreakerFailures int
	BreakerCoolDown time.Duration
	// ResponseHeaders makes every response carry response_headers_to_add
	// with the limit, the remaining count and the seconds until reset of
	// the descriptor closest to its limit (an over-limit one if any), as
	// envoyproxy/ratelimit does with LIMIT_RESPONSE_HEADERS_ENABLED, named
	// LimitHeader, RemainingHeader and ResetHeader (empty: x-ratelimit-limit,
	// x-ratelimit-remaining, x-ratelimit-reset; that project's own
	// defaults are RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset).
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// Shadow puts every descriptor in shadow mode, as envoyproxy/ratelimit's
	// SHADOW_MODE does (and engine.Rule.Shadow a rule): requests are
	// decided and debited as usual, but the overall code is always OK.
	// Decisions that would have refused a request are counted with
	// tollgate.outcome "shadow_denied".
	Shadow bool
	// QuotaMode puts every limited descriptor in quota mode, as
	// envoyproxy/ratelimit's QUOTA_MODE does (a descriptor's quota_mode:
	// true does it for one): a descriptor over its limit is answered OK
	// with its limit and what remains (nothing), never refuses the
	// request, and is named in the response's dynamic metadata
	// (DynamicMetadata).
	QuotaMode bool
	// CountOverLimit counts every descriptor's hits even over its limit,
	// each descriptor on its own, as envoyproxy/ratelimit counts them (its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, the default), and as
	// a configuration file's count_over_limit does for its domain: answers
	// are then envoyproxy/ratelimit's, request after request. Without it a
	// refused request debits none of its descriptors.
	CountOverLimit bool
	// DynamicMetadata makes every answer carry dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the descriptors' entries ("key=value") and hits_addend,
	// quotaModeEnabled and, when a quota-mode descriptor is over its
	// limit, quotaModeViolations (the indexes of those descriptors).
	DynamicMetadata bool
	// HitCounts, when set, is called after every decided request with each
	// limited descriptor's HitCounts, split as envoyproxy/ratelimit's
	// statistics split hits: a hit is near the limit above
	// ⌊NearLimitRatio·limit⌋ (that project's NEAR_LIMIT_RATIO; 0 means its
	// default, 0.8). It is called on the request's goroutine: it must be
	// quick and safe for concurrent use.
	HitCounts      func(HitCounts)
	NearLimitRatio float32
	// TracerProvider and MeterProvider say where spans and metrics go
	// (nil: the global providers).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

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

// resolve gives every zero field of o its default.
func (o Options) resolve() options {
	r := options{
		config:         o.Config,
		storeFail:      o.StoreFailAnswer,
		storeCalls:     storecall.Config{Timeout: o.StoreTimeout, BreakerFailures: o.BreakerFailures, BreakerCoolDown: o.BreakerCoolDown}.WithDefaults(),
		headers:        o.ResponseHeaders,
		headerNames:    [3]string{defaultLimitHeader, defaultRemainingHeader, defaultResetHeader},
		shadow:         o.Shadow,
		quota:          o.QuotaMode,
		countOver:      o.CountOverLimit,
		metadata:       o.DynamicMetadata,
		tracerProvider: o.TracerProvider,
		meterProvider:  o.MeterProvider,
	}
	for i, name := range [3]string{o.LimitHeader, o.RemainingHeader, o.ResetHeader} {
		if name != "" {
			r.headerNames[i] = name
		}
	}
	if o.HitCounts != nil {
		r.hits = &hitCounter{ratio: cmp.Or(o.NearLimitRatio, defaultNearLimitRatio), record: o.HitCounts}
	}
	return r
}
