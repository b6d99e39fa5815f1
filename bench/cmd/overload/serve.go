package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/store"
)

// tollgateStats is what tollgate's server reports of its overload control,
// read from its metrics.
type tollgateStats struct {
	Limit     float64
	RuleLimit float64          // the waiting method's rule's own limit (tollgate+rule)
	Shed      map[string]int64 // by criticality
	Why       map[string]int64 // by reason and the tenant's share
}

// tollgateServer is the gRPC door of an engine with overload control o and
// no rules, and how to read its metrics at the end.
func tollgateServer(o overload.Options, rules ...engine.Rule) ([]grpc.ServerOption, func() serverStats, error) {
	reader := sdkmetric.NewManualReader()
	mem, err := store.NewMemory()
	if err != nil {
		return nil, nil, err
	}
	l, err := interceptor.New(mem, interceptor.WithOverload(o), interceptor.WithRules(rules...), func(c *engine.Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	if err != nil {
		return nil, nil, err
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}
	return opts, func() serverStats {
		st := tollgateStats{Shed: map[string]int64{}, Why: map[string]int64{}}
		var rm metricdata.ResourceMetrics
		_ = reader.Collect(context.Background(), &rm)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Gauge[float64]:
					if m.Name == telemetry.MetricOverloadLimit {
						for _, p := range d.DataPoints {
							if _, ok := p.Attributes.Value(telemetry.AttrRule); ok {
								st.RuleLimit = p.Value
							} else {
								st.Limit = p.Value
							}
						}
					}
				case metricdata.Sum[int64]:
					if m.Name == telemetry.MetricOverloadShed {
						for _, p := range d.DataPoints {
							c, _ := p.Attributes.Value(telemetry.AttrCriticality)
							st.Shed[c.AsString()] += p.Value
							r, _ := p.Attributes.Value(telemetry.AttrOverloadReason)
							sh, _ := p.Attributes.Value(telemetry.AttrTenantShare)
							st.Why[r.AsString()+"/"+sh.AsString()] += p.Value
						}
					}
				}
			}
		}
		return serverStats{Tollgate: &st}
	}, nil
}

// The subjects: the same server with no protection, with failsafe-go's
// adaptive limiter and prioritizer, and with tollgate's overload control;
// and, for the cost of a refusal, a server that refuses every call in an
// interceptor, and one that answers without work.
const (
	subjectNone       = "none"
	subjectFailsafe   = "failsafe-go"
	subjectTollgate   = "tollgate"
	subjectThrottle   = "tollgate+throttle" // tollgate, and clients that throttle themselves
	subjectRule       = "tollgate+rule"     // tollgate, and a limit of its own for waitMethod (Rule.Overload)
	subjectRefuseIcpt = "refuse-interceptor"
	subjectRefuseDoor = "refuse-tollgate" // tollgate's gRPC door shedding every call
	subjectRefuseSigs = "refuse-signals"  // an interceptor refusing as tollgate does (RetryInfo, trailers), without deciding
	subjectAcceptNoop = "accept-noop"
	// baseSuffix marks a subject whose server is the -base executable: the
	// same harness built at another commit, so that old code and new run
	// beside each other, alternating, in one run.
	baseSuffix = "@base"
)

// serverOf is the server a subject runs: tollgate+throttle is tollgate's
// server with clients of its own.
func serverOf(subject string) string {
	subject = strings.TrimSuffix(subject, baseSuffix)
	if subject == subjectThrottle {
		return subjectTollgate
	}
	return subject
}

// serverConfig is what the measuring process tells a server process.
type serverConfig struct {
	Subject string
	CPU     int           // the CPU the server is pinned to
	Steps   int           // steps of work per call
	Spin    int           // iterations of the work loop per step
	Profile string        // write a CPU profile of the server here
	Procs   int           // GOMAXPROCS of the server (all on its one CPU)
	Wait    time.Duration // how long a call of waitMethod waits
	// DepSlots, when > 0, is how many calls of waitMethod its dependency
	// serves at once; the others wait their turn (dependency).
	DepSlots int
	// StreamWorkers, when > 0, is grpc.NumStreamWorkers: goroutines
	// reused for the server's streams instead of one started per stream.
	StreamWorkers int
}

// waitMethod is a method whose calls wait (on a dependency, say) rather
// than compute: the mix scenario's second class of call.
const waitMethod = "/tollgate.bench.Wait/Say"

// waitService serves waitMethod: each call waits d, or until its caller
// gives up, after waiting for one of slots seats of its dependency when
// slots > 0. Its handler names the method it is (a copy of the echo
// service's description would name echo's Say to the interceptors).
func waitService(d time.Duration, slots int) *grpc.ServiceDesc {
	var dep chan struct{}
	if slots > 0 {
		dep = make(chan struct{}, slots)
	}
	return &grpc.ServiceDesc{
		ServiceName: "tollgate.bench.Wait",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Say", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				if dep != nil {
					select {
					case dep <- struct{}{}:
						defer func() { <-dep }()
					case <-ctx.Done():
						return nil, status.FromContextError(ctx.Err()).Err()
					}
				}
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
					return req, nil
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: waitMethod}, h)
		}}},
	}
}

// serverStats is what a server process reports when it is stopped.
type serverStats struct {
	CPU      time.Duration                          // user+system CPU of the whole process
	Tollgate *tollgateStats                         `json:",omitempty"`
	Failsafe *struct{ Limit, Inflight, Queued int } `json:",omitempty"`
	// Server-side p50 and p99 of the CRITICAL_PLUS calls served, in ms:
	// in the server (from the first interceptor) and in the handler.
	InServer, InHandler [2]float64
}

// timing measures CRITICAL_PLUS calls inside the server, to tell the
// server's part of their latency from the network's and the client's.
type timing struct {
	mu                  sync.Mutex
	inServer, inHandler bench.Histogram
}

func isCriticalPlus(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(overload.Header)
	return len(v) > 0 && v[0] == overload.CriticalPlus.String()
}

func (t *timing) interceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if err == nil && isCriticalPlus(ctx) {
		t.mu.Lock()
		t.inServer.Record(time.Since(start))
		t.mu.Unlock()
	}
	return resp, err
}

func (t *timing) handler(w func(context.Context, string) error) func(context.Context, string) error {
	return func(ctx context.Context, m string) error {
		start := time.Now()
		err := w(ctx, m)
		if err == nil && isCriticalPlus(ctx) {
			t.mu.Lock()
			t.inHandler.Record(time.Since(start))
			t.mu.Unlock()
		}
		return err
	}
}

func (t *timing) fill(st *serverStats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st.InServer = [2]float64{ms(t.inServer.Quantile(0.5)), ms(t.inServer.Quantile(0.99))}
	st.InHandler = [2]float64{ms(t.inHandler.Quantile(0.5)), ms(t.inHandler.Quantile(0.99))}
}

// serve runs a server process: pinned to one CPU, so its capacity is one
// core's, whatever its GOMAXPROCS; it prints its address, serves until
// SIGTERM, then prints its stats.
func serve(cfgJSON string) error {
	var cfg serverConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	runtime.GOMAXPROCS(cfg.Procs)
	if err := pin(cfg.CPU); err != nil {
		return err
	}
	opts, stats, err := protection(cfg.Subject)
	if err != nil {
		return err
	}
	if cfg.Profile != "" {
		f, err := os.Create(cfg.Profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var tm timing
	if cfg.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)))
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(tm.interceptor)}, opts...)...)
	w := work{steps: cfg.Steps, spin: cfg.Spin}
	before := tm.handler(w.call)
	switch cfg.Subject {
	case subjectAcceptNoop, subjectRefuseIcpt, subjectRefuseSigs:
		before = nil
	case subjectRefuseDoor:
		// The one seat is held until its caller gives up: every other
		// call is shed.
		before = func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
	}
	echo.Register(srv, &echo.Server{Before: before})
	srv.RegisterService(waitService(cfg.Wait, cfg.DepSlots), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "ADDR %s\n", lis.Addr())
	_ = out.Flush()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; srv.Stop() }()
	_ = srv.Serve(lis)
	st := stats()
	st.CPU = processCPU()
	tm.fill(&st)
	b, _ := json.Marshal(st)
	fmt.Fprintf(out, "STATS %s\n", b)
	return out.Flush()
}

func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// protection returns the server options of a subject and how to read its
// stats at the end.
func protection(subject string) ([]grpc.ServerOption, func() serverStats, error) {
	none := func() serverStats { return serverStats{} }
	switch subject {
	case subjectNone, subjectAcceptNoop:
		return nil, none, nil
	case subjectTollgate:
		return tollgateServer(overload.Options{Tenant: keyfunc.Metadata(bench.TenantHeader)})
	case subjectRule:
		tenant := keyfunc.Metadata(bench.TenantHeader)
		return tollgateServer(overload.Options{Tenant: tenant},
			engine.Rule{Name: "wait", Methods: []string{waitMethod}, Overload: &overload.Options{Tenant: tenant}})
	case subjectRefuseSigs:
		// What tollgate's door sends a shed call, built per call as it is:
		// the wire cost of the signals, apart from the decision's.
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			wait := overload.Critical.RetryAfter(100 * time.Millisecond)
			_ = grpc.SetTrailer(ctx, metadata.MD{"retry-after": {"1"}, "grpc-retry-pushback-ms": {strconv.FormatInt(wait.Milliseconds(), 10)}})
			st := status.New(codes.Unavailable, "overload: CRITICAL call shed (queue full); retry after "+wait.Round(time.Millisecond).String())
			if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
				st = d
			}
			return nil, st.Err()
		})}, none, nil
	case subjectRefuseDoor:
		return tollgateServer(overload.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, MaxQueue: 1, ProbeInterval: -1})
	case subjectFailsafe:
		// Library defaults. Its gRPC interceptor runs the limiter with the
		// executor's context, where no call's priority is, so the priority
		// is wired by hand: its own interceptor reads x-failsafe-priority
		// into the call's context, and the limiter runs with that context.
		p := adaptivelimiter.NewPrioritizer()
		p.ScheduleCalibrations(context.Background(), 100*time.Millisecond)
		limiter := adaptivelimiter.NewBuilder[any]().BuildPrioritized(p)
		exec := failsafe.With[any](limiter)
		run := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return exec.WithContext(ctx).GetWithExecution(func(failsafe.Execution[any]) (any, error) { return handler(ctx, req) })
		}
		opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(failsafegrpc.NewUnaryServerInterceptorWithLevel(true), run)}
		return opts, func() serverStats {
			return serverStats{Failsafe: &struct{ Limit, Inflight, Queued int }{limiter.Limit(), limiter.Inflight(), limiter.Queued()}}
		}, nil
	case subjectRefuseIcpt:
		refused := status.New(codes.Unavailable, "overload: shed").Err()
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, refused
		})}, none, nil
	}
	return nil, nil, errors.New("unknown subject " + subject)
}
