package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// ReportCost adds n to the final cost of the call ctx belongs to, for rules
// whose Settle reads it (SettleReported). A handler, or anything it calls
// with its context, reports what the call really cost once it knows (the
// tokens a model generated, the rows a query read); on a stream every
// report adds to the stream's cost. Outside a limited call it does nothing.
func ReportCost(ctx context.Context, n int64) {
	if r, ok := ctx.Value(reportKey{}).(*report); ok {
		r.cost.Add(n)
		r.made.Store(true)
	}
}

// reportKey is the context key of a call's report.
type reportKey struct{}

// report is what a call's handler reported with ReportCost.
type report struct {
	cost atomic.Int64
	made atomic.Bool
}

// SettleReported is a Rule.Settle: the cost the handler reported with
// ReportCost, when it reported any; otherwise the reservation stands.
func SettleReported(ctx context.Context, _ any, _ error) (int64, bool) {
	r, ok := ctx.Value(reportKey{}).(*report)
	if !ok || !r.made.Load() {
		return 0, false
	}
	return r.cost.Load(), true
}

// settlement is what one rule owes a call once its handler returns: the
// requests it debited (on the shared store, or the local one under
// FailLocal), their decisions, and the cost reserved.
type settlement struct {
	p        *plan
	st       tollgate.Settler
	reqs     []tollgate.Request
	adms     []tollgate.Admission
	reserved int64
	// local: st is the FailLocal store.
	local bool
}

// admissions returns what settling the requests decs answered needs of
// them.
func admissions(decs []tollgate.Decision) []tollgate.Admission {
	adms := make([]tollgate.Admission, len(decs))
	for i, d := range decs {
		adms[i] = d.Admission()
	}
	return adms
}

// afterCall is what a call owes its rules once it ends: the settlements
// of rules with Settle, and the seats it holds.
type afterCall struct {
	settles []settlement
	seats   []*heldSeat
	// ended: end ran; it runs once.
	ended bool
}

// errPanicked is the error a call whose handler panicked is ended with
// (EndPanicked): its rules' Settle see it, whatever an outer recovery
// layer answers the client.
var errPanicked = errors.New("engine: the handler panicked")

// owed returns what the checks of an admitted call owe once it ends, or
// nil. (A refused call owes nothing: its seats are given back when it is
// refused.)
func (l *Limiter) owed(ctx context.Context, checks []*check) *afterCall {
	var a afterCall
	for _, c := range checks {
		if c.seat.holding() {
			a.seats = append(a.seats, l.holdSeat(ctx, c))
		}
		if c.p.rule.Settle == nil || c.p.scope != scopeCall {
			continue
		}
		st, local := l.store, false
		switch c.res.outcome {
		case outcomeAllowed, outcomeReplayed:
		case outcomeFailLocal:
			st, local = l.local, true
		default:
			continue // nothing was debited
		}
		if len(c.reqs) == 0 {
			continue // an in-flight limit alone: no cost to settle
		}
		settler, ok := st.(tollgate.Settler)
		if !ok {
			continue // not reached: New refuses Settle on a store that does not settle
		}
		a.settles = append(a.settles, settlement{
			p: c.p, st: settler, reqs: slices.Clone(c.reqs), adms: admissions(c.decs),
			reserved: c.res.cost, local: local,
		})
	}
	if a.settles == nil && a.seats == nil {
		return nil
	}
	return &a
}

// end hands what a call owes once its handler returned resp and err to
// the Limiter's sender (see sender): the response does not wait for it.
// The final costs are read now, under ctx (the handler's, carrying its
// report); the seats stop being renewed and their hold times are recorded.
// A call ends once: a second end does nothing.
func (l *Limiter) end(ctx context.Context, a *afterCall, resp any, err error) {
	if a == nil || a.ended {
		return
	}
	a.ended = true
	e := &ending{seats: a.seats}
	for i := range a.settles {
		s := &a.settles[i]
		cost, ok := s.p.rule.Settle(ctx, resp, err)
		if !ok {
			continue
		}
		if l.settleCost(ctx, s, cost) {
			e.settles = append(e.settles, owedSettle{settlement: *s, cost: cost})
		}
	}
	for _, h := range a.seats {
		h.end()
	}
	l.sender.add(l, e)
}

// withReport returns ctx carrying a fresh report for ReportCost.
func withReport(ctx context.Context) context.Context {
	return context.WithValue(ctx, reportKey{}, new(report))
}

// settleCost checks cost, the final cost s's rule's Settle gave, and
// gives s the request id its delivery is applied once by: the call's own,
// or one made for it. It reports whether s is to be delivered; a cost out
// of range is logged, counted and dropped (the reservation stands).
func (l *Limiter) settleCost(ctx context.Context, s *settlement, cost int64) bool {
	_, sp := l.tel.tracer.Start(ctx, "ratelimit settle "+s.p.rule.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(telemetry.AttrRule.String(s.p.rule.Name), telemetry.AttrCost.Int64(s.reserved), telemetry.AttrFinalCost.Int64(cost)))
	defer sp.End()
	if cost < 0 || cost > tollgate.MaxRate {
		sp.SetStatus(otelcodes.Error, "the final cost is out of range")
		l.recordSettle(ctx, s.p, s.reserved, cost, settleInvalid)
		l.log.Error("rate limit settle: the final cost (the rule's Settle, or the handler's ReportCost total under SettleReported) is out of range; the reservation stands",
			"rule", s.p.rule.Name, "cost", cost, "min", 0, "max", tollgate.MaxRate)
		return false
	}
	if s.reqs[0].RequestID == "" {
		id := newSettleID()
		for i := range s.reqs {
			s.reqs[i].RequestID = id
		}
	}
	return true
}

// newSettleID returns a request id for the settlement of a call that came
// without one.
func newSettleID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "settle-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// settleOutcome is the value of tollgate.settle.outcome.
type settleOutcome uint8

const (
	settleApplied settleOutcome = iota // the store applied it
	settleRetried                      // the store failed; it is retried
	settleDropped                      // given up: the reservation stands
	settleInvalid                      // the rule's Settle returned a cost out of range
	numSettleOutcomes
)

var settleOutcomeNames = [numSettleOutcomes]string{"applied", "retried", "dropped", "invalid"}

// settleTelemetry counts settlements and their units.
type settleTelemetry struct {
	settles metric.Int64Counter
	units   metric.Int64Counter
}

func newSettleTelemetry(meter metric.Meter) (settleTelemetry, error) {
	settles, err := meter.Int64Counter(telemetry.MetricSettles, metric.WithUnit("{settlement}"),
		metric.WithDescription("Settlements of final costs, by rule and outcome."))
	if err != nil {
		return settleTelemetry{}, err
	}
	units, err := meter.Int64Counter(telemetry.MetricSettledUnits, metric.WithUnit("{unit}"),
		metric.WithDescription("Units reserved at admission and settled as final cost, by rule and kind."))
	return settleTelemetry{settles: settles, units: units}, err
}

func (l *Limiter) recordSettle(ctx context.Context, p *plan, reserved, final int64, o settleOutcome) {
	rule := telemetry.AttrRule.String(p.rule.Name)
	l.settleTel.settles.Add(ctx, 1, metric.WithAttributes(rule, telemetry.AttrSettleOutcome.String(settleOutcomeNames[o])))
	switch o {
	case settleApplied:
		l.settleTel.units.Add(ctx, reserved, metric.WithAttributes(rule, telemetry.AttrCostKind.String("reserved")))
		l.settleTel.units.Add(ctx, final, metric.WithAttributes(rule, telemetry.AttrCostKind.String("final")))
	case settleDropped:
		l.settleTel.units.Add(ctx, reserved, metric.WithAttributes(rule, telemetry.AttrCostKind.String("dropped_reserved")))
		l.settleTel.units.Add(ctx, final, metric.WithAttributes(rule, telemetry.AttrCostKind.String("dropped_final")))
	}
}

// checkSettler refuses r when it settles (Rule.Settle) on a store that
// cannot: the shared store, or the local one of FailLocal.
func (l *Limiter) checkSettler(r Rule) error {
	if r.Settle == nil {
		return nil
	}
	if _, ok := l.store.(tollgate.Settler); !ok {
		return fmt.Errorf("engine: rule %q: Settle needs a store that settles (tollgate.Settler), which %T is not", r.Name, l.store)
	}
	if _, ok := l.local.(tollgate.Settler); !ok && r.FailMode.kind == failLocal {
		return fmt.Errorf("engine: rule %q: Settle with FailLocal needs a local store that settles (tollgate.Settler), which %T is not", r.Name, l.local)
	}
	return nil
}
