package interceptor

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
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

// SettleFailures returns a Rule.Settle that keeps the reservation of a call
// ending with one of codes and gives back the reservation of any other
// (success included): only failures count, as in "5 failed logins per 15
// minutes". A call is still refused up front when its failures used the
// quota.
func SettleFailures(failures ...codes.Code) func(context.Context, any, error) (int64, bool) {
	failures = slices.Clone(failures)
	return func(_ context.Context, _ any, err error) (int64, bool) {
		if slices.Contains(failures, status.Code(err)) {
			return 0, false
		}
		return 0, true
	}
}

// settlement is what one rule owes a call once its handler returns: the
// requests it debited (on the shared store, or the local one under
// FailLocal), their decisions, and the cost reserved.
type settlement struct {
	p        *plan
	st       tollgate.Store
	reqs     []tollgate.Request
	decs     []tollgate.Decision
	reserved int64
	// local: st is the FailLocal store.
	local bool
}

// afterCall is what a call owes its rules once it ends: the settlements
// of rules with Settle, and the slots it holds.
type afterCall struct {
	settles []settlement
	slots   []*heldSlot
}

// owed returns what the checks of a call decided as res owe once it ends,
// or nil. A refused call owes nothing: its slots are given back now.
func (l *Limiter) owed(ctx context.Context, checks []*check, res result) *afterCall {
	if res.err != nil {
		l.releaseAll(ctx, checks)
		return nil
	}
	var a afterCall
	for _, c := range checks {
		if c.slot.holding() {
			a.slots = append(a.slots, l.holdSlot(ctx, c))
		}
		if c.p.rule.Settle == nil || c.p.scope != scopeCall {
			continue
		}
		st := l.store
		switch c.res.outcome {
		case outcomeAllowed, outcomeReplayed:
		case outcomeFailLocal:
			st = l.local
		default:
			continue // nothing was debited
		}
		if len(c.reqs) == 0 {
			continue // an in-flight limit alone: no cost to settle
		}
		a.settles = append(a.settles, settlement{
			p: c.p, st: st, reqs: slices.Clone(c.reqs), decs: slices.Clone(c.decs),
			reserved: c.res.cost, local: st == l.local,
		})
	}
	if a.settles == nil && a.slots == nil {
		return nil
	}
	return &a
}

// end settles what a call owes once its handler returned resp and err,
// under ctx (the handler's, carrying its report), and releases its slots.
func (l *Limiter) end(ctx context.Context, a *afterCall, resp any, err error) {
	if a == nil {
		return
	}
	l.settle(ctx, a.settles, resp, err)
	for _, h := range a.slots {
		h.end()
	}
}

// withReport returns ctx carrying a fresh report for ReportCost.
func withReport(ctx context.Context) context.Context {
	return context.WithValue(ctx, reportKey{}, new(report))
}

// settle settles every settlement of a call whose handler returned resp
// and err, under ctx (the handler's, carrying its report). A settlement the
// store cannot take now is retried in the background (see settler); the
// call's own answer is never changed by it.
func (l *Limiter) settle(ctx context.Context, owed []settlement, resp any, err error) {
	for i := range owed {
		s := &owed[i]
		cost, ok := s.p.rule.Settle(ctx, resp, err)
		if !ok {
			continue
		}
		l.settleOne(ctx, s, cost)
	}
}

// settleOne applies cost to s, once now and, when the store fails, again
// later.
func (l *Limiter) settleOne(ctx context.Context, s *settlement, cost int64) {
	sctx, sp := l.tel.tracer.Start(ctx, "ratelimit settle "+s.p.rule.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrRule.String(s.p.rule.Name), AttrCost.Int64(s.reserved), AttrFinalCost.Int64(cost)))
	defer sp.End()
	if cost < 0 || cost > tollgate.MaxRate {
		sp.SetStatus(otelcodes.Error, "the final cost is out of range")
		l.recordSettle(sctx, s.p, s.reserved, cost, settleInvalid)
		l.log.Error("rate limit settle: the final cost (the rule's Settle, or the handler's ReportCost total under SettleReported) is out of range; the reservation stands",
			"rule", s.p.rule.Name, "cost", cost, "min", 0, "max", tollgate.MaxRate)
		return
	}
	// Every settlement carries a request id, the call's own or one made
	// for it, so that retrying it is safe: the store applies it once.
	if s.reqs[0].RequestID == "" {
		id := newSettleID()
		for i := range s.reqs {
			s.reqs[i].RequestID = id
		}
	}
	err := l.applySettle(context.WithoutCancel(sctx), s, cost)
	if err == nil {
		l.recordSettle(sctx, s.p, s.reserved, cost, settleApplied)
		return
	}
	sp.RecordError(err)
	sp.SetStatus(otelcodes.Error, err.Error())
	l.recordSettle(sctx, s.p, s.reserved, cost, settleRetried)
	l.settler.add(l, *s, cost, err)
}

// applySettle makes one attempt at s: on the shared store under its
// policy (deadline, breaker), on the local one as it is.
func (l *Limiter) applySettle(ctx context.Context, s *settlement, cost int64) error {
	if s.local {
		return l.callSettle(ctx, s, cost)
	}
	_, _, err := l.calls.Do(ctx, func(ctx context.Context) error { return l.callSettle(ctx, s, cost) })
	return err
}

func (l *Limiter) callSettle(ctx context.Context, s *settlement, cost int64) error {
	if len(s.reqs) == 1 {
		_, err := s.st.Settle(ctx, s.reqs[0], s.decs[0], cost)
		return err
	}
	costs := make([]int64, len(s.reqs))
	for i := range costs {
		costs[i] = cost
	}
	_, err := s.st.SettleAll(ctx, s.reqs, s.decs, costs)
	return err
}

// newSettleID returns a request id for the settlement of a call that came
// without one.
func newSettleID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "settle-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// Settlement retries.
const (
	// settleRetryFor is how long a settlement the store could not take is
	// retried, with backoff, before it is dropped.
	settleRetryFor = 10 * time.Second
	// maxPendingSettles bounds the settlements waiting for a retry; past it
	// new failures are dropped at once.
	maxPendingSettles = 10_000
)

// settler retries settlements the store failed, in one goroutine that runs
// only while some wait, each until settleRetryFor after its first attempt.
type settler struct {
	mu      sync.Mutex
	pending []retry
	running bool
}

type retry struct {
	s        settlement
	cost     int64
	deadline time.Time
	next     time.Time
	wait     time.Duration
}

// add queues s for retries, or drops it when too many wait.
func (q *settler) add(l *Limiter, s settlement, cost int64, cause error) {
	now := time.Now()
	q.mu.Lock()
	if len(q.pending) >= maxPendingSettles {
		q.mu.Unlock()
		l.recordSettle(context.Background(), s.p, s.reserved, cost, settleDropped)
		l.log.Error("rate limit settle: dropped, too many settlements wait for the store", "rule", s.p.rule.Name, "cost", cost, "error", cause)
		return
	}
	q.pending = append(q.pending, retry{s: s, cost: cost, deadline: now.Add(settleRetryFor), next: now.Add(10 * time.Millisecond), wait: 10 * time.Millisecond})
	start := !q.running
	q.running = true
	q.mu.Unlock()
	l.log.Warn("rate limit settle: the store failed, retrying", "rule", s.p.rule.Name, "cost", cost, "error", cause)
	if start {
		go q.run(l)
	}
}

// run retries what is pending until nothing is.
func (q *settler) run(l *Limiter) {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		now := time.Now()
		var due []retry
		next := now.Add(time.Second)
		keep := q.pending[:0]
		for _, r := range q.pending {
			if !now.Before(r.next) {
				due = append(due, r)
			} else {
				keep = append(keep, r)
				if r.next.Before(next) {
					next = r.next
				}
			}
		}
		q.pending = keep
		q.mu.Unlock()
		for _, r := range due {
			err := l.applySettle(context.Background(), &r.s, r.cost)
			switch {
			case err == nil:
				l.recordSettle(context.Background(), r.s.p, r.s.reserved, r.cost, settleApplied)
				continue
			case time.Now().After(r.deadline):
				l.recordSettle(context.Background(), r.s.p, r.s.reserved, r.cost, settleDropped)
				l.log.Error("rate limit settle: dropped, the store failed for too long", "rule", r.s.p.rule.Name, "cost", r.cost, "error", err)
				continue
			}
			r.wait = min(2*r.wait, time.Second)
			r.next = time.Now().Add(r.wait)
			q.mu.Lock()
			q.pending = append(q.pending, r)
			q.mu.Unlock()
		}
		if len(due) == 0 {
			time.Sleep(time.Until(next))
		}
	}
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
	settles, err := meter.Int64Counter(MetricSettles, metric.WithUnit("{settlement}"),
		metric.WithDescription("Settlements of final costs, by rule and outcome."))
	if err != nil {
		return settleTelemetry{}, err
	}
	units, err := meter.Int64Counter(MetricSettledUnits, metric.WithUnit("{unit}"),
		metric.WithDescription("Units reserved at admission and settled as final cost, by rule and kind."))
	return settleTelemetry{settles: settles, units: units}, err
}

func (l *Limiter) recordSettle(ctx context.Context, p *plan, reserved, final int64, o settleOutcome) {
	rule := AttrRule.String(p.rule.Name)
	l.settleTel.settles.Add(ctx, 1, metric.WithAttributes(rule, AttrSettleOutcome.String(settleOutcomeNames[o])))
	if o == settleApplied {
		l.settleTel.units.Add(ctx, reserved, metric.WithAttributes(rule, AttrCostKind.String("reserved")))
		l.settleTel.units.Add(ctx, final, metric.WithAttributes(rule, AttrCostKind.String("final")))
	}
}

// Settlement telemetry names.
const (
	// MetricSettles counts settlements (Rule.Settle), with the attributes
	// tollgate.rule and tollgate.settle.outcome: "applied", "retried" (the
	// store failed; the settlement waits for another try), "dropped" (the
	// store failed too long: the reservation stands) or "invalid".
	MetricSettles = "tollgate.settles"
	// MetricSettledUnits counts the units of applied settlements, with the
	// attributes tollgate.rule and tollgate.cost.kind: "reserved" (what
	// admission debited) or "final" (what the call cost).
	MetricSettledUnits = "tollgate.settled.units"

	AttrFinalCost     = attribute.Key("tollgate.final_cost")     // units a settlement made the call's cost
	AttrSettleOutcome = attribute.Key("tollgate.settle.outcome") // see MetricSettles
	AttrCostKind      = attribute.Key("tollgate.cost.kind")      // "reserved" or "final"
)
