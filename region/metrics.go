package region

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/telemetry"
)

// instruments are a Region's metrics (telemetry.MetricRegion*).
type instruments struct {
	meter    metric.Meter
	region   attribute.KeyValue
	share    metric.Int64ObservableGauge
	demand   metric.Int64ObservableGauge
	age      metric.Float64ObservableGauge
	refusals metric.Int64Counter
	reports  metric.Int64Counter
	reg      metric.Registration
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &instruments{meter: mp.Meter("github.com/tollgate/tollgate/region")}
	var err error
	if m.share, err = m.meter.Int64ObservableGauge(telemetry.MetricRegionShare, metric.WithUnit("{unit}"),
		metric.WithDescription("the shares of the global limits the region holds")); err != nil {
		return nil, err
	}
	if m.demand, err = m.meter.Int64ObservableGauge(telemetry.MetricRegionDemand, metric.WithUnit("{unit}"),
		metric.WithDescription("the demand the region last reported")); err != nil {
		return nil, err
	}
	if m.age, err = m.meter.Float64ObservableGauge(telemetry.MetricRegionLeaseAge, metric.WithUnit("s"),
		metric.WithDescription("the longest time since the home last granted one of the region's shares")); err != nil {
		return nil, err
	}
	if m.refusals, err = m.meter.Int64Counter(telemetry.MetricRegionRefusals, metric.WithUnit("{request}"),
		metric.WithDescription("requests refused for want of share")); err != nil {
		return nil, err
	}
	if m.reports, err = m.meter.Int64Counter(telemetry.MetricRegionReports, metric.WithUnit("{report}"),
		metric.WithDescription("reports to the home")); err != nil {
		return nil, err
	}
	return m, nil
}

// observe registers the gauges' callback, which sums r's entries per
// global limit.
func (m *instruments) observe(r *Region) error {
	m.region = telemetry.AttrRegion.String(r.s.name)
	var err error
	m.reg, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		type sums struct {
			share, demand int64
			age           time.Duration
		}
		now := time.Now()
		by := make(map[*shared]*sums, len(r.s.limits))
		for _, sh := range r.s.limits {
			by[sh] = &sums{}
		}
		r.entries.Range(func(_, v any) bool {
			e := v.(*entry)
			s := by[e.sh]
			p := e.plan.Load()
			s.share += e.inForce(p, now, r.s.skew)
			s.demand += e.demand.Load()
			if !p.granted.IsZero() {
				s.age = max(s.age, now.Sub(p.granted))
			}
			return true
		})
		for sh, s := range by {
			set := metric.WithAttributes(m.region, telemetry.AttrLimit.String(sh.limit.String()))
			o.ObserveInt64(m.share, s.share, set)
			o.ObserveInt64(m.demand, s.demand, set)
			o.ObserveFloat64(m.age, s.age.Seconds(), set)
		}
		return nil
	}, m.share, m.demand, m.age)
	return err
}

// refused counts a request refused for want of share under sh.
func (m *instruments) refused(sh *shared) {
	m.refusals.Add(context.Background(), 1, metric.WithAttributes(m.region, telemetry.AttrLimit.String(sh.limit.String())))
}

// reported counts n reports with result.
func (m *instruments) reported(n int, result string) {
	m.reports.Add(context.Background(), int64(n), metric.WithAttributes(m.region, telemetry.AttrResult.String(result)))
}

// stop unregisters the gauges' callback.
func (m *instruments) stop() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}
