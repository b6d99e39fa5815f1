// Package orcaload reports a tollgate server's load to its clients' load
// balancers as ORCA load reports (google.golang.org/grpc/orca), so that a
// client balancing with weighted_round_robin sends less to a replica near
// its adaptive concurrency limit (engine.Config.Overload) and to one that
// sheds. It is a module of its own because ORCA's protos bring the xDS API
// module, which the core module does without.
//
//	opts := append(orcaload.ServerOptions(lim.Limiter), grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))
//	srv := grpc.NewServer(opts...)
//	_ = orca.Register(srv, orca.ServiceOptions{ServerMetricsProvider: orcaload.Provider(lim.Limiter)}) // out of band, too
package orcaload

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"

	"github.com/tollgate/tollgate/engine"
)

// ServerOptions send l's load (Provider's) in the trailer of every call
// the server answers, as an ORCA per-call load report: give them to
// grpc.NewServer before tollgate's interceptors. orca.CallMetricsServerOption
// alone sends a report only for a call whose handler asked for its
// recorder; the interceptors here ask for every call.
func ServerOptions(l *engine.Limiter) []grpc.ServerOption {
	return []grpc.ServerOption{
		orca.CallMetricsServerOption(Provider(l)),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			orca.CallMetricsRecorderFromContext(ctx)
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			orca.CallMetricsRecorderFromContext(ss.Context())
			return handler(srv, ss)
		}),
	}
}

// Provider returns the load of l's overload control as an ORCA server
// metrics provider: application utilization is what the next call would
// make of the concurrency limit, (calls in flight + calls waiting + 1) ÷
// the limit (above 1 when the next call would wait; never 0, which a
// weighted_round_robin balancer ignores, so an idle replica reports a
// small load rather than none); QPS the calls finished per second; EPS
// the calls shed per second over the last second. A Limiter without
// overload control reports nothing (every field unset), and a balancer
// then ignores the report. The provider is safe for concurrent use.
func Provider(l *engine.Limiter) orca.ServerMetricsProvider {
	return &provider{l: l, now: time.Now}
}

// rateInterval is how long a shed rate is measured over.
const rateInterval = time.Second

type provider struct {
	l   *engine.Limiter
	now func() time.Time

	mu       sync.Mutex
	since    time.Time // the start of the interval being measured
	shedThen uint64    // the shed count at since
	eps      float64   // the last interval's shed rate
}

// ServerMetrics returns the load now, a fresh value each call.
func (p *provider) ServerMetrics() *orca.ServerMetrics {
	sm := &orca.ServerMetrics{
		CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{},
	}
	st, ok := p.l.Overload()
	if !ok || st.Limit <= 0 {
		return sm
	}
	sm.AppUtilization = float64(st.InFlight+st.Queued+1) / st.Limit
	if st.Throughput > 0 {
		sm.QPS = st.Throughput
	}
	sm.EPS = p.shedRate(st.Shed)
	return sm
}

// shedRate is the calls shed per second over the last interval.
func (p *provider) shedRate(shed uint64) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch el := now.Sub(p.since); {
	case p.since.IsZero():
		p.since, p.shedThen = now, shed
	case el >= rateInterval:
		p.eps = float64(shed-p.shedThen) / el.Seconds()
		p.since, p.shedThen = now, shed
	}
	return p.eps
}
