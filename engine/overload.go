package engine

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/shed"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// admission is the overload control every call passes before its rules
// (Config.Overload): a seat under the adaptive concurrency limit, waited
// for in the room by criticality and tenant. A unary call holds its seat
// until End; a stream, and a call whose door never ends it (Call.NoEnd),
// is only refused when a call of its criticality would be shed now, and
// holds none: a stream's life is not a handler's latency, and a seat never
// given back would close the server.
type admission struct {
	l      *shed.Limiter
	tenant keyfunc.Func
	shed   metric.Int64Counter
	reg    metric.Registration
	// shedAttrs are the shed counter's attributes, by criticality, reason
	// and tenant share (over or not), built once: building a set per
	// refusal sorts it, and grows the small stack of the handler's
	// goroutine, on the path that must stay cheapest under overload.
	shedAttrs [shed.Levels][shed.QueueTimeout + 1][2]metric.AddOption
}

// newAdmission returns the admission step o configures, or nil for none.
func newAdmission(o *overload.Options, meter metric.Meter) (*admission, error) {
	if o == nil {
		return nil, nil
	}
	l, err := shed.New(*o)
	if err != nil {
		return nil, err
	}
	a := &admission{l: l, tenant: o.Tenant}
	for c := range a.shedAttrs {
		for r := range a.shedAttrs[c] {
			for over, share := range [2]string{"within", "over"} {
				a.shedAttrs[c][r][over] = metric.WithAttributeSet(attribute.NewSet(
					telemetry.AttrCriticality.String(shed.Criticality(c).String()),
					telemetry.AttrOverloadReason.String(strings.ReplaceAll(shed.Reason(r).String(), " ", "_")),
					telemetry.AttrTenantShare.String(share)))
			}
		}
	}
	if a.shed, err = meter.Int64Counter(telemetry.MetricOverloadShed, metric.WithUnit("{call}"),
		metric.WithDescription("Calls shed by overload control, by criticality, reason and tenant share.")); err != nil {
		return nil, err
	}
	limit, err := meter.Float64ObservableGauge(telemetry.MetricOverloadLimit, metric.WithUnit("{call}"),
		metric.WithDescription("The adaptive concurrency limit."))
	if err != nil {
		return nil, err
	}
	inFlight, err := meter.Int64ObservableGauge(telemetry.MetricOverloadInFlight, metric.WithUnit("{call}"),
		metric.WithDescription("Calls holding a seat of the concurrency limit."))
	if err != nil {
		return nil, err
	}
	queued, err := meter.Int64ObservableGauge(telemetry.MetricOverloadQueued, metric.WithUnit("{call}"),
		metric.WithDescription("Calls waiting for a seat."))
	if err != nil {
		return nil, err
	}
	a.reg, err = meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := l.Stats()
		ob.ObserveFloat64(limit, st.Limit)
		ob.ObserveInt64(inFlight, int64(st.InFlight))
		ob.ObserveInt64(queued, int64(st.Queued))
		return nil
	}, limit, inFlight, queued)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// admit passes v's call through the admission step: it returns false with
// v refused when the call is shed (or its caller goes away while it
// waits), and otherwise true, v.ctx carrying the call's criticality for
// the calls its handler makes and v.seat its seat, if it takes one.
func (a *admission) admit(v *Verdict, call *Call) bool {
	c, _ := shed.CriticalityOf(func(k string) string {
		vs, _ := call.Header.Values(k)
		if len(vs) == 0 {
			return ""
		}
		return vs[0]
	})
	sc := shed.Call{Criticality: c}
	if a.tenant != nil {
		sc.Tenant, _ = a.tenant(v.ctx, keyfunc.Call{Method: call.Method, Header: call.Header, Peer: call.Peer})
	}
	var err error
	if call.Stream || call.NoEnd {
		err = a.l.Check(sc)
	} else {
		v.seat, err = a.l.Acquire(v.ctx, sc)
	}
	if err != nil {
		v.err = a.refusal(v.ctx, err)
		return false
	}
	v.ctx = overload.WithCriticality(v.ctx, c)
	return true
}

// refusal is the refusal of a call the admission step did not admit.
func (a *admission) refusal(ctx context.Context, err error) *refusal {
	var r *shed.Refusal
	if !errors.As(err, &r) {
		return &refusal{kind: Canceled, msg: "overload: the caller went away while waiting for a seat: " + err.Error(), cause: err}
	}
	over := 0
	if r.OverShare {
		over = 1
	}
	a.shed.Add(ctx, 1, a.shedAttrs[min(int(r.Criticality), shed.Levels-1)][min(r.Reason, shed.QueueTimeout)][over])
	return &refusal{kind: Shed, msg: r.Error(), retryAfter: r.RetryAfter, cause: r}
}

// close stops the metrics' callback; on a nil admission it does nothing.
func (a *admission) close() {
	if a != nil && a.reg != nil {
		_ = a.reg.Unregister()
	}
}
