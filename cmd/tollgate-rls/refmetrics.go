package main

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/rls"
)

// refMetrics are envoyproxy/ratelimit's metric families as its default
// Prometheus mapping names them, so that dashboards and alerts built on
// them keep working: per descriptor (domain, key1, key2: the first levels
// of its statistics key) total_hits, within_limit, near_limit, over_limit
// and shadow_mode; per method total_requests and response_time_seconds
// (in milliseconds, as that project records it under that name);
// config_load_success and config_load_error.
type refMetrics struct {
	hits  [5]*prometheus.CounterVec
	byKey sync.Map // statistics key -> *[5]prometheus.Counter

	requests              *prometheus.CounterVec
	responseTime          *prometheus.HistogramVec
	loadSuccess, loadFail prometheus.Counter
}

// hitFamilies are the per-descriptor families, in HitCounts' order.
var hitFamilies = [5]string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"}

func newRefMetrics() *refMetrics {
	m := &refMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests", Help: "Calls, by gRPC method."}, []string{"grpc_method"}),
		responseTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ratelimit_service_response_time_seconds", Help: "Call latency in milliseconds (envoyproxy/ratelimit's unit under this name), by gRPC method.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"grpc_method"}),
		loadSuccess: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success", Help: "Configurations loaded."}),
		loadFail:    prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error", Help: "Configurations refused."}),
	}
	for i, name := range hitFamilies {
		m.hits[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: "Descriptor hits: " + strings.ReplaceAll(name, "_", " ") + "."},
			[]string{"domain", "key1", "key2"})
	}
	return m
}

// collectors returns every family, to register.
func (m *refMetrics) collectors() []prometheus.Collector {
	out := []prometheus.Collector{m.requests, m.responseTime, m.loadSuccess, m.loadFail}
	for _, h := range m.hits {
		out = append(out, h)
	}
	return out
}

// record counts one descriptor's hits (rls.Options.HitCounts).
func (m *refMetrics) record(h rls.HitCounts) {
	v, ok := m.byKey.Load(h.Key)
	if !ok {
		// A key's five series exist from its first hit, as the reference's
		// counters do once flushed.
		var cs [5]prometheus.Counter
		labels := statLabels(h.Key)
		for i := range cs {
			cs[i] = m.hits[i].With(labels)
		}
		v, _ = m.byKey.LoadOrStore(h.Key, &cs)
	}
	for i, n := range [5]uint64{h.Total, h.WithinLimit, h.NearLimit, h.OverLimit, h.ShadowMode} {
		if n > 0 {
			v.(*[5]prometheus.Counter)[i].Add(float64(n))
		}
	}
}

// ipv4 finds the addresses whose dots envoyproxy/ratelimit replaces in a
// statistics key.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statLabels splits a statistics key ("domain.key_value.key") as the
// default mapping does, after sanitizing it as envoyproxy/ratelimit does
// (':' and '|' become '_', so do an IPv4 address's dots).
func statLabels(key string) prometheus.Labels {
	key = strings.NewReplacer(":", "_", "|", "_").Replace(key)
	key = ipv4.ReplaceAllStringFunc(key, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
	parts := strings.SplitN(key, ".", 4)
	l := prometheus.Labels{"domain": parts[0], "key1": "", "key2": ""}
	if len(parts) > 1 {
		l["key1"] = parts[1]
	}
	if len(parts) > 2 {
		l["key2"] = parts[2]
	}
	return l
}

// loaded counts a configuration load.
func (m *refMetrics) loaded(err error) {
	if err != nil {
		m.loadFail.Inc()
		return
	}
	m.loadSuccess.Inc()
}

// interceptor counts every unary call and its latency by method.
func (m *refMetrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	m.requests.WithLabelValues(method).Inc()
	resp, err := handler(ctx, req)
	m.responseTime.WithLabelValues(method).Observe(float64(time.Since(start).Milliseconds()))
	return resp, err
}
