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
	"syscall"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	subjectRefuseTap  = "refuse-tap"
	subjectRefuseIcpt = "refuse-interceptor"
	subjectAcceptNoop = "accept-noop"
)

// serverConfig is what the measuring process tells a server process.
type serverConfig struct {
	Subject string
	CPU     int // the CPU the server is pinned to
	Steps   int // steps of work per call
	Spin    int // iterations of the work loop per step
	Profile string // write a CPU profile of the server here
}

// serverStats is what a server process reports when it is stopped.
type serverStats struct {
	CPU      time.Duration // user+system CPU of the whole process
	Tollgate *overload.Stats `json:",omitempty"`
	Failsafe *struct{ Limit, Inflight, Queued int } `json:",omitempty"`
}

// serve runs a server process: pinned to one CPU with GOMAXPROCS 1, so
// its capacity is one core's; it prints its address, serves until
// SIGTERM, then prints its stats.
func serve(cfgJSON string) error {
	var cfg serverConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	runtime.GOMAXPROCS(1)
	var set unix.CPUSet
	set.Set(cfg.CPU)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to CPU %d: %w", cfg.CPU, err)
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
	srv := grpc.NewServer(opts...)
	w := work{steps: cfg.Steps, spin: cfg.Spin}
	before := w.call
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
