package engine

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/shed"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// admission is one overload control a call passes before its store
// limits: the server's (Config.Overload) or a rule's (Rule.Overload). It
// is a seat under an adaptive concurrency limit, waited for in the room by
// criticality and tenant. A unary call holds its seat until End; a
// stream, and a call whose door never ends it (Call.NoEnd), is only
// refused when a call of its criticality would be shed now, and holds
// none: a stream's life is not a handler's latency, and a seat never given
// back would close the server.
type admission struct {
	l      *shed.Limiter
	o      overload.Options
	rule   string // "" for the server's
	tenant keyfunc.Func
	tel    *overloadTelemetry
	// shedAttrs are the shed counter's attributes, by criticality, reason
	// and tenant share (over or not), built once: building a set per
	// refusal sorts it, and grows the small stack of the handler's
	// goroutine, on the path that must stay cheapest under overload.
	shedAttrs [shed.Levels][shed.QueueTimeout + 1][2]metric.AddOption
	// observed is the gauges' attributes: the rule, if any.
	observed metric.ObserveOption
}

// overloadTelemetry is overload control's instruments, made once per
// Limiter: its callback observes the server's admission and those of the
// rules in force.
type overloadTelemetry struct {
	shed             metric.Int64Counter
	limit            metric.Float64ObservableGauge
	inFlight, queued metric.Int64ObservableGauge
	meter            metric.Meter
	reg              metric.Registration // nil until start
	server           *admission          // Config.Overload's; nil without
	rules            func() []*rule      // the rules in force
}

// init makes the instruments; the gauges' callback is registered the
// first time an admission exists (start), so that a Limiter without
// overload control registers none.
func (t *overloadTelemetry) init(meter metric.Meter, rules func() []*rule) error {
	t.meter, t.rules = meter, rules
	var err error
	if t.shed, err = meter.Int64Counter(telemetry.MetricOverloadShed, metric.WithUnit("{call}"),
		metric.WithDescription("Calls shed by overload control, by criticality, reason and tenant share (and rule, for a rule's own).")); err != nil {
		return err
	}
	if t.limit, err = meter.Float64ObservableGauge(telemetry.MetricOverloadLimit, metric.WithUnit("{call}"),
		metric.WithDescription("The adaptive concurrency limit (per rule, for a rule's own).")); err != nil {
		return err
	}
	if t.inFlight, err = meter.Int64ObservableGauge(telemetry.MetricOverloadInFlight, metric.WithUnit("{call}"),
		metric.WithDescription("Calls holding a seat of the concurrency limit.")); err != nil {
		return err
	}
	t.queued, err = meter.Int64ObservableGauge(telemetry.MetricOverloadQueued, metric.WithUnit("{call}"),
		metric.WithDescription("Calls waiting for a seat."))
	return err
}

// start registers the gauges' callback, once; callers hold the Limiter's
// configuration lock (New, SetRules).
func (t *overloadTelemetry) start() error {
	if t.reg != nil {
		return nil
	}
	reg, err := t.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		observe := func(a *admission) {
			st := a.l.Stats()
			ob.ObserveFloat64(t.limit, st.Limit, a.observed)
			ob.ObserveInt64(t.inFlight, int64(st.InFlight), a.observed)
			ob.ObserveInt64(t.queued, int64(st.Queued), a.observed)
		}
		if t.server != nil {
			observe(t.server)
		}
		for _, r := range t.rules() {
			if r.admission != nil {
				observe(r.admission)
			}
		}
		return nil
	}, t.limit, t.inFlight, t.queued)
	if err != nil {
		return err
	}
	t.reg = reg
	return nil
}

// close stops the gauges' callback.
func (t *overloadTelemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// newAdmission returns the admission step o configures for rule ("" for
// the server's), or nil for none. A rule's step whose options are those
// of prev (the same rule's before SetRules) keeps prev's limit, its room
// and the calls in it: what it learnt of the server stays.
func newAdmission(o *overload.Options, rule string, prev *admission, tel *overloadTelemetry) (*admission, error) {
	if o == nil {
		return nil, nil
	}
	a := &admission{o: *o, rule: rule, tenant: o.Tenant, tel: tel}
	if prev != nil && sameOverload(prev.o, a.o) {
		a.l = prev.l
	} else {
		l, err := shed.New(*o)
		if err != nil {
			return nil, err
		}
		a.l = l
	}
	var ruleAttr []attribute.KeyValue
	if rule != "" {
		ruleAttr = []attribute.KeyValue{telemetry.AttrRule.String(rule)}
	}
	a.observed = metric.WithAttributeSet(attribute.NewSet(ruleAttr...))
	for c := range a.shedAttrs {
		for r := range a.shedAttrs[c] {
			for over, share := range [2]string{"within", "over"} {
				a.shedAttrs[c][r][over] = metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{
					telemetry.AttrCriticality.String(shed.Criticality(c).String()),
					telemetry.AttrOverloadReason.String(strings.ReplaceAll(shed.Reason(r).String(), " ", "_")),
					telemetry.AttrTenantShare.String(share)}, ruleAttr...)...))
			}
		}
	}
	if rule == "" {
		tel.server = a // before the gauges' callback can read it
	}
	if err := tel.start(); err != nil {
		return nil, err
	}
	return a, nil
}

// sameOverload reports whether a and b configure the same limit: every
// field but Tenant, which is read per call.
func sameOverload(a, b overload.Options) bool {
	a.Tenant, b.Tenant = nil, nil
	return reflect.DeepEqual(a, b)
}

// criticalityOf reads a call's criticality from its headers.
func criticalityOf(call *Call) shed.Criticality {
	c, _ := shed.CriticalityOf(func(k string) string {
		vs, _ := call.Header.Values(k)
		if len(vs) == 0 {
			return ""
		}
		return vs[0]
	})
	return c
}

// admit passes v's call through overload control: the steps of its rules
// (set's, Rule.Overload) in their order when it has any, and otherwise the
// server's (Config.Overload). A rule's limit stands in for the server's:
// the server's is the CPU's, and a method bounded by its own limit (one
// waiting on a dependency, say) would otherwise hold a seat of the CPU's
// while it waits, and its dependency's latency would bring the CPU's limit
// down for every method. It returns false with v refused when a step sheds
// the call (or its caller goes away while it waits), having given back
// the seats it took; and otherwise true, v.ctx carrying the call's
// criticality for the calls its handler makes, and v holding its seats.
func (l *Limiter) admit(v *Verdict, call *Call, set *ruleSet) bool {
	c := criticalityOf(call)
	if set != nil && set.admissions != nil {
		for _, a := range set.admissions {
			seat, ok := a.admit(v, call, c)
			if !ok {
				v.releaseSeats()
				return false
			}
			if v.seat == nil {
				v.seat = seat
			} else if seat != nil {
				v.moreSeats = append(v.moreSeats, seat)
			}
		}
	} else {
		seat, ok := l.admission.admit(v, call, c)
		if !ok {
			return false
		}
		v.seat = seat
	}
	v.ctx = overload.WithCriticality(v.ctx, c)
	return true
}

// admit passes the call, of criticality c, through this step: a seat (nil
// for a stream or a call never ended), or false with v refused.
func (a *admission) admit(v *Verdict, call *Call, c shed.Criticality) (*shed.Seat, bool) {
	sc := shed.Call{Criticality: c, Class: call.Method}
	if a.tenant != nil {
		sc.Tenant, _ = a.tenant(v.ctx, keyfunc.Call{Method: call.Method, Header: call.Header, Peer: call.Peer})
	}
	var seat *shed.Seat
	var err error
	if call.Stream || call.NoEnd {
		err = a.l.Check(sc)
	} else {
		seat, err = a.l.Acquire(v.ctx, sc)
	}
	if err != nil {
		v.err = a.refusal(v.ctx, err)
		return nil, false
	}
	return seat, true
}

// refusal is the refusal of a call the admission step did not admit.
func (a *admission) refusal(ctx context.Context, err error) *refusal {
	whose := "overload"
	if a.rule != "" {
		whose = "rule " + strconv.Quote(a.rule) + ": overload"
	}
	var r *shed.Refusal
	if !errors.As(err, &r) {
		return &refusal{kind: Canceled, msg: whose + ": the caller went away while waiting for a seat: " + err.Error(), cause: err}
	}
	over := 0
	if r.OverShare {
		over = 1
	}
	a.tel.shed.Add(ctx, 1, a.shedAttrs[min(int(r.Criticality), shed.Levels-1)][min(r.Reason, shed.QueueTimeout)][over])
	msg := r.Error()
	if a.rule != "" {
		msg = "rule " + strconv.Quote(a.rule) + ": " + msg
	}
	return &refusal{kind: Shed, msg: msg, retryAfter: r.RetryAfter, cause: r}
}

// releaseSeats gives back the overload seats of a call refused before its
// handler ran: no latency is recorded for them.
func (v *Verdict) releaseSeats() {
	if v.seat != nil {
		v.seat.Release()
	}
	for _, s := range v.moreSeats {
		s.Release()
	}
}

// doneSeats gives back the overload seats of a call whose handler ran,
// recording its latency.
func (v *Verdict) doneSeats() {
	if v.seat != nil {
		v.seat.Done()
	}
	for _, s := range v.moreSeats {
		s.Done()
	}
}

// OverloadState is the server's overload control now (Config.Overload):
// what a load report says of the replica.
type OverloadState struct {
	// Limit is the adaptive concurrency limit (1 during a probe).
	Limit float64
	// InFlight and Queued are the calls holding a seat and those waiting
	// for one.
	InFlight, Queued int
	// Throughput is the calls finished per second, smoothed over the
	// limit's intervals; 0 before the first interval ends.
	Throughput float64
	// Shed counts the calls shed since the Limiter was made.
	Shed uint64
}

// Overload returns the state of the server's overload control, and false
// when it has none (Config.Overload nil). A rule's own limits
// (Rule.Overload) are not in it.
func (l *Limiter) Overload() (OverloadState, bool) {
	if l.admission == nil {
		return OverloadState{}, false
	}
	st := l.admission.l.Stats()
	var shed uint64
	for _, n := range st.ShedBy {
		shed += n
	}
	return OverloadState{Limit: st.Limit, InFlight: st.InFlight, Queued: st.Queued, Throughput: st.Throughput, Shed: shed}, true
}
