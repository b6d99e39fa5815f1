package storecall

import (
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/telemetry"
)

// The names decisions and store latency are recorded under, shared by
// package interceptor and package rls.
const (
	MetricDecisions     = telemetry.MetricDecisions
	MetricStoreDuration = telemetry.MetricStoreDuration

	AttrRule         = telemetry.AttrRule
	AttrScope        = telemetry.AttrScope
	AttrAlgorithm    = telemetry.AttrAlgorithm
	AttrLimit        = telemetry.AttrLimit
	AttrCost         = telemetry.AttrCost
	AttrAllowed      = telemetry.AttrAllowed
	AttrRemaining    = telemetry.AttrRemaining
	AttrRetryAfterMs = telemetry.AttrRetryAfterMs
	AttrReplayed     = telemetry.AttrReplayed
	AttrFailMode     = telemetry.AttrFailMode
	AttrOutcome      = telemetry.AttrOutcome
	AttrStoreResult  = telemetry.AttrStoreResult
	AttrShadow       = telemetry.AttrShadow
)

// Attribute values.
const (
	FailModeOpen   = "open"   // AttrFailMode of a fail-open rule or descriptor
	FailModeClosed = "closed" // AttrFailMode of a fail-closed one
	FailModeLocal  = "local"  // AttrFailMode of a fail-local rule
	FailModeNone   = "none"   // AttrFailMode when the store decided
	StoreOK        = "ok"     // AttrStoreResult when the store answered
	StoreError     = "error"  // AttrStoreResult when it failed
	ScopeCall      = "call"   // AttrScope of a unary call or a stream's opening
)

// Outcome is the value of AttrOutcome: what became of one decision.
type Outcome uint8

const (
	OutcomeAllowed      Outcome = iota // the store admitted the call
	OutcomeDenied                      // the store denied it
	OutcomeReplayed                    // a retry of an admitted call, not debited again
	OutcomeFailOpen                    // the store could not decide; admitted by FailOpen
	OutcomeFailClosed                  // the store could not decide; Unavailable by FailClosed
	OutcomeFailLocal                   // the store could not decide; the local store did
	OutcomeInvalid                     // no decision possible: a malformed request, a bad key, cost or limit
	OutcomeError                       // a function of the rule failed
	OutcomeCanceled                    // the caller went away before the store answered
	OutcomeSkipped                     // this rule would have admitted the call, another refused it: nothing debited
	OutcomeShadowDenied                // a shadow rule denied the call, which went on
	OutcomePeeked                      // looked at, not debited: not a decision
	OutcomeBlocked                     // an override of no limits blocks the caller
	OutcomeRefunded                    // hits given back (is_negative_hits)
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	"allowed", "denied", "replayed", "fail_open", "fail_closed", "fail_local", "invalid", "error", "canceled", "skipped", "shadow_denied", "peeked", "blocked", "refunded",
}

// String returns the outcome's name, as AttrOutcome carries it.
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// StoreDurationBounds are MetricStoreDuration's bucket bounds, in seconds:
// 50µs to 1s.
var StoreDurationBounds = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// Instruments are the two instruments decisions are recorded into.
type Instruments struct {
	Decisions     metric.Int64Counter     // MetricDecisions
	StoreDuration metric.Float64Histogram // MetricStoreDuration
}

// NewInstruments creates the instruments on the meter named
// instrumentationName of mp (nil: otel's global provider), with the same
// names, units, descriptions and bounds whoever records into them.
func NewInstruments(mp metric.MeterProvider, instrumentationName string) (Instruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	decisions, err := meter.Int64Counter(MetricDecisions,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by rule, scope and outcome."))
	if err != nil {
		return Instruments{}, err
	}
	storeDuration, err := meter.Float64Histogram(MetricStoreDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time the shared store took to decide or fail."),
		metric.WithExplicitBucketBoundaries(StoreDurationBounds...))
	if err != nil {
		return Instruments{}, err
	}
	return Instruments{Decisions: decisions, StoreDuration: storeDuration}, nil
}

// DecisionOptions returns the MetricDecisions options of one decision, to
// build once and reuse: recording then builds no attribute set.
func DecisionOptions(rule, scope string, o Outcome, allowed bool) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		AttrRule.String(rule), AttrScope.String(scope), AttrOutcome.String(o.String()), AttrAllowed.Bool(allowed)))}
}

// StoreOptions returns the MetricStoreDuration options of rule's store
// calls that the store answered and of those that failed, to build once.
func StoreOptions(rule string) (ok, failed []metric.RecordOption) {
	name := AttrRule.String(rule)
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(name, AttrStoreResult.String(StoreOK)))},
		[]metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(name, AttrStoreResult.String(StoreError)))}
}
