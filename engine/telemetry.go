package engine

import (
	"context"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "github.com/tollgate/tollgate/engine"

// outcome is the value of tollgate.outcome: what became of one decision.
type outcome = storecall.Outcome

const (
	outcomeAllowed      = storecall.OutcomeAllowed      // the store admitted the call
	outcomeDenied       = storecall.OutcomeDenied       // the store denied it: ResourceExhausted
	outcomeReplayed     = storecall.OutcomeReplayed     // a retry of an admitted call, not debited again
	outcomeFailOpen     = storecall.OutcomeFailOpen     // the store could not decide; admitted by FailOpen
	outcomeFailClosed   = storecall.OutcomeFailClosed   // the store could not decide; Unavailable by FailClosed
	outcomeFailLocal    = storecall.OutcomeFailLocal    // the store could not decide; the local store did
	outcomeInvalid      = storecall.OutcomeInvalid      // no decision possible: bad request id, missing key, bad cost or limit
	outcomeError        = storecall.OutcomeError        // a rule's Key or PerCaller function failed
	outcomeCanceled     = storecall.OutcomeCanceled     // the caller went away before the store answered
	outcomeSkipped      = storecall.OutcomeSkipped      // this rule would have admitted the call, another refused it: nothing debited
	outcomeShadowDenied = storecall.OutcomeShadowDenied // a shadow rule denied the call, which went on
	outcomeBlocked      = storecall.OutcomeBlocked      // an override of no limits blocks the caller: PermissionDenied
	numOutcomes         = storecall.NumOutcomes
)

// instruments holds the tracer and instruments every rule records into.
type instruments struct {
	tracer   trace.Tracer
	provider trace.TracerProvider // tracer's
	tracing  tracing
	storecall.Instruments
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (instruments, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ins, err := storecall.NewInstruments(mp, instrumentationName)
	if err != nil {
		return instruments{}, err
	}
	return instruments{tracer: tp.Tracer(instrumentationName), provider: tp, tracing: tracingOf(tp), Instruments: ins}, nil
}

// tracing says whether decisions start spans. A no-op tracer's Start still
// allocates a span and a context per call, a third of an admitted call's
// allocations (BenchmarkUnaryAdmit, which runs with the global provider
// unset), for spans nobody records.
type tracing uint8

const (
	tracingOn tracing = iota
	// tracingOff: the provider is trace/noop's, which never records.
	tracingOff
	// tracingUntilGlobal: the provider is otel's global one with no
	// provider set behind it yet, whose spans record nothing. Once
	// otel.SetTracerProvider is called, otel.GetTracerProvider returns the
	// new provider and the global one delegates to it: spans start again.
	// (otel's eBPF auto-instrumentation, which hooks the global tracer's
	// unset path, sees no decision spans.)
	tracingUntilGlobal
)

// globalProviderType is the type of the provider otel.GetTracerProvider
// returns before otel.SetTracerProvider is called (an unexported type of
// otel's internal/global package).
var globalProviderType = reflect.TypeOf(otel.GetTracerProvider())

func tracingOf(tp trace.TracerProvider) tracing {
	if _, ok := tp.(noop.TracerProvider); ok {
		return tracingOff
	}
	t := reflect.TypeOf(tp)
	if t == globalProviderType && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return tracingUntilGlobal
	}
	return tracingOn
}

// start starts p's decision span under ctx; when tracing is off, it returns
// ctx and a span that records nothing, without allocating either.
func (t *instruments) start(ctx context.Context, p *plan) (context.Context, trace.Span) {
	if t.tracing == tracingOff || t.tracing == tracingUntilGlobal && otel.GetTracerProvider() == t.provider {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, p.tel.spanName, p.tel.spanStart...)
}

func newPlanTelemetry(rule string, s scope, limits []tollgate.Limit, shadow bool) planTelemetry {
	t := planTelemetry{spanName: "ratelimit " + rule}
	name := telemetry.AttrRule.String(rule)
	attrs := []attribute.KeyValue{name, telemetry.AttrScope.String(s.String())}
	// The limit is known here when there is one and no function chooses it;
	// otherwise each span names the most restrictive limit of its decision.
	if len(limits) == 1 {
		attrs = append(attrs, telemetry.AttrAlgorithm.String(limits[0].Algorithm.String()), telemetry.AttrLimit.String(limits[0].String()))
	} else {
		t.limitPerCall = true
	}
	if shadow {
		attrs = append(attrs, telemetry.AttrShadow.Bool(true))
	}
	t.spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	for o := range numOutcomes {
		for allowed := range 2 {
			t.decisions[o][allowed] = storecall.DecisionOptions(rule, s.String(), o, allowed == 1)
		}
	}
	t.storeOK, t.storeErr = storecall.StoreOptions(rule)
	t.rule = []metric.RecordOption{metric.WithAttributes(name)}
	return t
}

// storeCall is the store call a check was decided in, as the store
// latency metric records it.
type storeCall struct {
	measured, failed bool
	elapsed          time.Duration
}

// recordAll records the decision of every check and the store call it was
// decided in, and ends the check's span.
func (t *instruments) recordAll(checks []*check) {
	for _, c := range checks {
		if s := c.store; s.measured {
			opt := c.p.tel.storeOK
			if s.failed {
				opt = c.p.tel.storeErr
			}
			t.StoreDuration.Record(c.ctx, s.elapsed.Seconds(), opt...)
		}
		t.recordDecision(c.ctx, c.span, c.p, &c.res)
		c.span.End()
	}
}

// recordDecision counts res and, when the span is sampled, puts the
// decision on it.
func (t *instruments) recordDecision(ctx context.Context, span trace.Span, p *plan, res *result) {
	allowed := 0
	if res.allowed() {
		allowed = 1
	}
	t.Decisions.Add(ctx, 1, p.tel.decisions[res.outcome][allowed]...)
	if !span.IsRecording() {
		return
	}
	failMode := storecall.FailModeNone
	if res.storeFailed {
		failMode = p.rule.FailMode.String()
	}
	attrs := []attribute.KeyValue{
		telemetry.AttrCost.Int64(res.cost),
		telemetry.AttrAllowed.Bool(allowed == 1),
		telemetry.AttrRemaining.Int64(res.decision.Remaining),
		telemetry.AttrRetryAfterMs.Int64(int64(roundUp(res.decision.RetryAfter, time.Millisecond) / time.Millisecond)),
		telemetry.AttrReplayed.Bool(res.decision.Replayed),
		telemetry.AttrFailMode.String(failMode),
		telemetry.AttrOutcome.String(res.outcome.String()),
	}
	if p.tel.limitPerCall && res.limit.Rate > 0 {
		attrs = append(attrs, telemetry.AttrAlgorithm.String(res.limit.Algorithm.String()), telemetry.AttrLimit.String(res.limit.String()))
	}
	span.SetAttributes(attrs...)
	if res.cause != nil {
		span.RecordError(res.cause)
		span.SetStatus(codes.Error, res.cause.Error())
	}
}
