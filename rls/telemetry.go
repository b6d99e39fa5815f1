package rls

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/interceptor"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "github.com/tollgate/tollgate/rls"

// AttrDomain is the span attribute naming the request's domain.
const AttrDomain = attribute.Key("tollgate.rls.domain")

// AttrDescriptors is the span attribute counting the request's descriptors.
const AttrDescriptors = attribute.Key("tollgate.rls.descriptors")

// outcome is the value of tollgate.outcome, with package interceptor's
// names.
type outcome uint8

const (
	outcomeAllowed      outcome = iota // admitted and debited
	outcomeDenied                      // over the limit (or in a refused set)
	outcomeShadowDenied                // over the limit, let through by shadow mode
	outcomeFailOpen                    // the store could not decide; answered OK
	outcomeFailClosed                  // the store could not decide; answered Unavailable
	outcomeInvalid                     // a malformed or oversized request
	outcomeCanceled                    // the caller went away first
	outcomePeeked                      // hits_addend 0: looked at, not a decision
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"allowed", "denied", "shadow_denied", "fail_open", "fail_closed", "invalid", "canceled", "peeked",
}

// storeDurationBounds are package interceptor's, in seconds.
var storeDurationBounds = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// telemetry records spans, decisions and store latency with the metric
// names and attributes of package interceptor, so one dashboard shows the
// edge and the services: interceptor.MetricDecisions with
// interceptor.AttrRule (here the descriptor's configuration path, as
// "domain.key_value.key"), AttrOutcome and AttrAllowed, and
// interceptor.MetricStoreDuration with AttrStoreResult.
type telemetry struct {
	tracer        trace.Tracer
	spanStart     []trace.SpanStartOption
	decisions     metric.Int64Counter
	storeDuration metric.Float64Histogram
	// store caches each domain's latency options, [ok, error].
	store sync.Map // string -> *[2][]metric.RecordOption

	// options caches the attribute options of each (rule, outcome) so that
	// recording builds no attribute set. detailed_metric rules, whose names
	// carry request values, are not cached.
	options sync.Map // decisionKey -> []metric.AddOption
}

type decisionKey struct {
	rule    string
	outcome outcome
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	decisions, err := meter.Int64Counter(interceptor.MetricDecisions,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by rule, scope and outcome."))
	if err != nil {
		return nil, err
	}
	storeDuration, err := meter.Float64Histogram(interceptor.MetricStoreDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time the shared store took to decide or fail."),
		metric.WithExplicitBucketBoundaries(storeDurationBounds...))
	if err != nil {
		return nil, err
	}
	return &telemetry{
		tracer:        tp.Tracer(instrumentationName),
		spanStart:     []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)},
		decisions:     decisions,
		storeDuration: storeDuration,
	}, nil
}

// recordStore records one store call's latency, with the domain as
// tollgate.rule. Only configured domains reach the store, so the cache is
// bounded by the configurations loaded.
func (t *telemetry) recordStore(ctx context.Context, domain string, elapsed time.Duration, failed bool) {
	v, ok := t.store.Load(domain)
	if !ok {
		rule := interceptor.AttrRule.String(domain)
		v, _ = t.store.LoadOrStore(domain, &[2][]metric.RecordOption{
			{metric.WithAttributeSet(attribute.NewSet(rule, interceptor.AttrStoreResult.String("ok")))},
			{metric.WithAttributeSet(attribute.NewSet(rule, interceptor.AttrStoreResult.String("error")))},
		})
	}
	i := 0
	if failed {
		i = 1
	}
	t.storeDuration.Record(ctx, elapsed.Seconds(), v.(*[2][]metric.RecordOption)[i]...)
}

func (t *telemetry) decisionOptions(rule string, o outcome, cache bool) []metric.AddOption {
	k := decisionKey{rule, o}
	if cache {
		if v, ok := t.options.Load(k); ok {
			return v.([]metric.AddOption)
		}
	}
	opts := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		interceptor.AttrRule.String(rule),
		interceptor.AttrScope.String("call"),
		interceptor.AttrOutcome.String(outcomeNames[o]),
		interceptor.AttrAllowed.Bool(o != outcomeDenied && o != outcomeFailClosed && o != outcomeInvalid && o != outcomeCanceled)))}
	if cache {
		t.options.Store(k, opts)
	}
	return opts
}

// recordSlots counts one decision per limited descriptor.
func (s *Server) recordSlots(ctx context.Context, slots []slot) {
	for i := range slots {
		sl := &slots[i]
		switch sl.kind {
		case kindNone, kindUnlimited, kindPeek:
			continue
		}
		s.tel.decisions.Add(ctx, 1, s.tel.decisionOptions(sl.metric, sl.outcome, !sl.rule.detailed)...)
	}
}

// recordCall puts the request's outcome on its span.
func (t *telemetry) recordCall(span trace.Span, domain string, descriptors int, o outcome, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		AttrDomain.String(domain),
		AttrDescriptors.Int(descriptors),
		interceptor.AttrOutcome.String(outcomeNames[o]),
		interceptor.AttrAllowed.Bool(o != outcomeDenied && err == nil),
	)
	if o == outcomeShadowDenied {
		span.SetAttributes(attribute.Bool("tollgate.shadow", true))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
