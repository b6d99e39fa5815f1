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
	"sync"
	"syscall"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/overload/overloadgrpc"
)

// The subjects: the same server with no protection, with failsafe-go's
// adaptive limiter and prioritizer, and with tollgate's overload control;
// and, for the cost of a refusal, servers that refuse every call in the
// tap handle or in an interceptor, and one that answers without work.
const (
	subjectNone       = "none"
	subjectFailsafe   = "failsafe-go"
	subjectTollgate   = "tollgate"
	subjectNoTap      = "tollgate-interceptor" // tollgate without the early refusal
	subjectThrottle   = "tollgate+throttle"    // tollgate, and clients that throttle themselves
	subjectRefuseTap  = "refuse-tap"
	subjectRefuseIcpt = "refuse-interceptor"
	subjectAcceptNoop = "accept-noop"
)

// serverOf is the server a subject runs: tollgate+throttle is tollgate's
// server with clients of its own.
func serverOf(subject string) string {
	if subject == subjectThrottle {
		return subjectTollgate
	}
	return subject
}

// serverConfig is what the measuring process tells a server process.
type serverConfig struct {
	Subject string
	CPU     int    // the CPU the server is pinned to
	Steps   int    // steps of work per call
	Spin    int    // iterations of the work loop per step
	Profile string // write a CPU profile of the server here
	Procs   int    // GOMAXPROCS of the server (all on its one CPU)
}

// serverStats is what a server process reports when it is stopped.
type serverStats struct {
	CPU      time.Duration                          // user+system CPU of the whole process
	Tollgate *overload.Stats                        `json:",omitempty"`
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
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(tm.interceptor)}, opts...)...)
	w := work{steps: cfg.Steps, spin: cfg.Spin}
	before := tm.handler(w.call)
	if cfg.Subject == subjectAcceptNoop || cfg.Subject == subjectRefuseTap || cfg.Subject == subjectRefuseIcpt {
		before = nil
	}
	echo.Register(srv, &echo.Server{Before: before})
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
	case subjectTollgate, subjectNoTap:
		l, err := overload.New(overload.Options{})
		if err != nil {
			return nil, nil, err
		}
		s := overloadgrpc.NewServer(l, overloadgrpc.TenantHeader(bench.TenantHeader))
		opts := s.Options()
		if subject == subjectNoTap {
			opts = []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor())}
		}
		return opts, func() serverStats { st := l.Stats(); return serverStats{Tollgate: &st} }, nil
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
	case subjectRefuseTap:
		refused := status.New(codes.Unavailable, "overload: shed").Err()
		return []grpc.ServerOption{grpc.InTapHandle(func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, refused })}, none, nil
	case subjectRefuseIcpt:
		refused := status.New(codes.Unavailable, "overload: shed").Err()
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, refused
		})}, none, nil
	}
	return nil, nil, errors.New("unknown subject " + subject)
}
