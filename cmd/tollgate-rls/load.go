package main

import (
	"context"
	"log"
	"strings"
	"sync"
	"sync/atomic"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/rls"
)

// loader swaps configurations into the server, from the directory or from
// the xDS server, and says so: the log, the reload counter, the reference
// metrics, the health state.
type loader struct {
	ctx     context.Context
	srv     *rls.Server
	logger  *log.Logger
	reloads metric.Int64Counter
	ref     *refMetrics // nil: no metrics served
	onLoad  func()

	// any: a configuration was loaded; first is closed then.
	any       atomic.Bool
	firstOnce sync.Once
	first     chan struct{}
	mu        sync.Mutex
}

// loaded swaps conf in, from source (a directory or "xDS").
func (l *loader) loaded(conf *rls.Config, source string) {
	l.srv.SetConfig(conf)
	l.mark(nil)
	for _, w := range conf.Warnings() {
		l.logger.Printf("warning: %v", w)
	}
	if len(conf.Domains()) == 0 {
		l.logger.Printf("warning: configuration %s holds no domain: every request is answered OK, unlimited", source)
	} else {
		l.logger.Printf("configuration %s: domains %s", source, strings.Join(conf.Domains(), ", "))
	}
	l.any.Store(true)
	l.firstOnce.Do(func() {
		l.mu.Lock()
		if l.first == nil {
			l.first = make(chan struct{})
		}
		close(l.first)
		l.mu.Unlock()
	})
	if l.onLoad != nil {
		l.onLoad()
	}
}

// rejected says that a configuration was refused and the previous one
// keeps serving.
func (l *loader) rejected(err error) {
	l.mark(err)
	l.logger.Printf("configuration rejected, previous configuration kept: %v", err)
}

// reload swaps in the directory's files if they are all valid. The old
// configuration serves until then, and calls in flight finish with the one
// they began with.
func (l *loader) reload(dir string) {
	next, err := rls.LoadDir(dir)
	if err != nil {
		l.mark(err)
		l.logger.Printf("reload rejected, previous configuration kept: %v", err)
		return
	}
	l.srv.SetConfig(next)
	l.mark(nil)
	for _, w := range next.Warnings() {
		l.logger.Printf("warning: %v", w)
	}
	l.logger.Printf("reloaded %s: domains %s", dir, strings.Join(next.Domains(), ", "))
}

// mark counts a load's result.
func (l *loader) mark(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	l.reloads.Add(l.ctx, 1, metric.WithAttributes(telemetry.AttrResult.String(result)))
	if l.ref != nil {
		l.ref.loaded(err)
	}
}

// await waits for the first configuration; false when ctx ended first.
func (l *loader) await(ctx context.Context) bool {
	l.mu.Lock()
	if l.first == nil {
		l.first = make(chan struct{})
	}
	first := l.first
	l.mu.Unlock()
	select {
	case <-first:
		return true
	case <-ctx.Done():
		return false
	}
}

// gate answers for the server once a configuration is loaded; before, as
// envoyproxy/ratelimit started with FORCE_START_WITHOUT_INITIAL_CONFIG,
// with an error (UNAVAILABLE here, where that project says UNKNOWN): Envoy's
// failure_mode_deny decides.
type gate struct {
	pb.UnimplementedRateLimitServiceServer
	srv    *rls.Server
	loaded *atomic.Bool
}

// ShouldRateLimit asks the server once a configuration is loaded.
func (g *gate) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if !g.loaded.Load() {
		return nil, errNoConfig
	}
	return g.srv.ShouldRateLimit(ctx, req)
}

var errNoConfig = status.Error(codes.Unavailable, "no rate limit configuration loaded")
