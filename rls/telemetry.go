package rls

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "github.com/tollgate/tollgate/rls"

// outcome is the value of tollgate.outcome, with package interceptor's
// names. A request has the outcomes allowed, denied, shadow_denied,
// fail_open, fail_closed, invalid and canceled; a descriptor looked at with
// hits_addend 0 is peeked.
type outcome = storecall.Outcome

// instruments records spans, decisions and store latency under package
// interceptor's metric names and attributes, so one dashboard shows the
// edge and the services: tollgate.decisions with tollgate.rule (here the
// descriptor's configuration path, as "domain.key_value.key"),
// tollgate.outcome and tollgate.allowed, and tollgate.store.duration with
// tollgate.store.result.
type instruments struct {
	tracer    trace.Tracer
	spanStart []trace.SpanStartOption
	storecall.Instruments
	// quotaActions counts the quota service's actions (telemetry.MetricRLSQuotaActions).
	quotaActions metric.Int64Counter
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

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*instruments, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ins, err := storecall.NewInstruments(mp, instrumentationName)
	if err != nil {
		return nil, err
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	quotaActions, err := mp.Meter(instrumentationName).Int64Counter(telemetry.MetricRLSQuotaActions,
		metric.WithUnit("{action}"), metric.WithDescription("Rate limit quota service actions sent, by domain and action."))
	if err != nil {
		return nil, err
	}
	return &instruments{
		tracer:       tp.Tracer(instrumentationName),
		spanStart:    []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)},
		Instruments:  ins,
		quotaActions: quotaActions,
	}, nil
}

// recordAction counts one quota service action in domain (a configured
// one, or "" for the others: the attribute sets stay few).
func (t *instruments) recordAction(ctx context.Context, domain, action string) {
	t.quotaActions.Add(ctx, 1, metric.WithAttributes(telemetry.AttrRLSDomain.String(domain), telemetry.AttrRLSAction.String(action)))
}

// recordStore records one store call's latency when it is the store's,
// with the domain as tollgate.rule. Only configured domains reach the
// store, so the cache is bounded by the configurations loaded.
func (t *instruments) recordStore(ctx context.Context, domain string, r storecall.Result, elapsed time.Duration) {
	if !r.Measured() {
		return
	}
	v, ok := t.store.Load(domain)
	if !ok {
		var opts [2][]metric.RecordOption
		opts[0], opts[1] = storecall.StoreOptions(domain)
		v, _ = t.store.LoadOrStore(domain, &opts)
	}
	i := 0
	if r == storecall.Failed {
		i = 1
	}
	t.StoreDuration.Record(ctx, elapsed.Seconds(), v.(*[2][]metric.RecordOption)[i]...)
}

func (t *instruments) decisionOptions(rule string, o outcome, cache bool) []metric.AddOption {
	k := decisionKey{rule, o}
	if cache {
		if v, ok := t.options.Load(k); ok {
			return v.([]metric.AddOption)
		}
	}
	opts := storecall.DecisionOptions(rule, storecall.ScopeCall, o, admits(o))
	if cache {
		t.options.Store(k, opts)
	}
	return opts
}

// admits reports whether a descriptor's outcome lets the request go on.
func admits(o outcome) bool {
	switch o {
	case storecall.OutcomeDenied, storecall.OutcomeFailClosed, storecall.OutcomeInvalid, storecall.OutcomeCanceled:
		return false
	}
	return true
}

// recordChecks counts one decision per limited descriptor.
func (s *Server) recordChecks(ctx context.Context, checks []check) {
	for i := range checks {
		c := &checks[i]
		switch c.kind {
		case kindNone, kindUnlimited, kindPeek:
			continue
		}
		s.tel.Decisions.Add(ctx, 1, s.tel.decisionOptions(c.metric, c.outcome, !c.rule.detailed)...)
	}
}

// recordCall puts the request's outcome on its span.
func (t *instruments) recordCall(span trace.Span, domain string, descriptors int, o outcome, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		telemetry.AttrRLSDomain.String(domain),
		telemetry.AttrRLSDescriptors.Int(descriptors),
		storecall.AttrOutcome.String(o.String()),
		storecall.AttrAllowed.Bool(o != storecall.OutcomeDenied && err == nil),
	)
	if o == storecall.OutcomeShadowDenied {
		span.SetAttributes(storecall.AttrShadow.Bool(true))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
