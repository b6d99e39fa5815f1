package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/overload"
)

const (
	levels   = int(overload.CriticalPlus) + 1
	tenants  = 10
	deadline = time.Second
)

// stream is one part of the offered load: calls/s of one criticality from
// one tenant, Poisson.
type stream struct {
	rate   float64
	class  overload.Criticality
	tenant int
	wait   bool // calls waitMethod, which waits instead of computing
}

// cell is the outcome of one subject under one load.
type cell struct {
	Subject, Scenario string
	X                 float64 // offered load, in capacities
	Window            time.Duration
	Offered, OK       [levels]int64
	Refused, Timeout  [levels]int64
	Asked, Served     [tenants]int64
	TRefused          [tenants]int64 // refused, by tenant
	TTimeout          [tenants]int64 // past the deadline, by tenant
	// WaitAsked and WaitServed count the calls of waitMethod (mix), of
	// those counted above; WaitLat their latency.
	WaitAsked, WaitServed int64
	WaitLat               bench.Histogram
	Lat                   [levels]bench.Histogram
	All                   bench.Histogram
	Lag                   bench.Histogram // the generator's lateness
	Server                serverStats
	Wall                  time.Duration // the server process's life
}

func (c *cell) sum(a [levels]int64) (n int64) {
	for _, v := range a {
		n += v
	}
	return n
}

// served is the fraction of class k's calls answered OK within the
// deadline.
func (c *cell) served(k overload.Criticality) float64 {
	if c.Offered[k] == 0 {
		return 0
	}
	return float64(c.OK[k]) / float64(c.Offered[k])
}

// server is a running server process.
type server struct {
	cmd  *exec.Cmd
	out  io.ReadCloser
	addr string
	done chan struct{}
	rest []byte
}

// startServer starts a server process: exe, or this executable when "".
func startServer(exe string, cfg serverConfig) (*server, error) {
	b, _ := json.Marshal(cfg)
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		exe = self
	}
	cmd := exec.Command(exe, "-serve", string(b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, out: out}
	line, err := readLine(out)
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("server %s did not start: %q %v", cfg.Subject, line, err)
	}
	s.addr = strings.TrimPrefix(line, "ADDR ")
	return s, nil
}

func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := r.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}

// stop ends the server and reads its stats.
func (s *server) stop() (serverStats, error) {
	var st serverStats
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	line, err := readLine(s.out)
	_ = s.cmd.Wait()
	if err != nil && line == "" {
		return st, fmt.Errorf("server stats: %w", err)
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "STATS ")), &st); err != nil {
		return st, fmt.Errorf("server stats %q: %w", line, err)
	}
	return st, nil
}

// run offers streams to a fresh server of subject for warmup+window and
// counts the calls scheduled in the window.
func (m *measurer) run(subject, scenario string, x float64, streams []stream) (*cell, error) {
	cfg := serverConfig{Subject: serverOf(subject), CPU: m.serverCPU, Steps: m.steps, Spin: m.spin, Procs: m.serverProcs, Wait: m.wait, StreamWorkers: m.streamWorkers}
	if scenario == "dependency" {
		cfg.DepSlots = m.depSlots
	}
	if m.profiles != "" {
		cfg.Profile = fmt.Sprintf("%s/%s-%s-%g.pprof", m.profiles, scenario, subject, x)
	}
	exe := ""
	if strings.HasSuffix(subject, baseSuffix) {
		if m.base == "" {
			return nil, fmt.Errorf("subject %s needs -base", subject)
		}
		exe = m.base
	}
	born := time.Now()
	srv, err := startServer(exe, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*echo.Client, tenants)
	ccs := make([]*grpc.ClientConn, tenants)
	for i := range conns {
		dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if strings.TrimSuffix(subject, baseSuffix) == subjectThrottle {
			t, err := overload.NewThrottle(overload.ThrottleOptions{})
			if err != nil {
				return nil, err
			}
			dial = append(dial, grpc.WithUnaryInterceptor(interceptor.UnaryClientInterceptor(t)))
		}
		cc, err := grpc.NewClient(srv.addr, dial...)
		if err != nil {
			_, _ = srv.stop()
			return nil, err
		}
		defer cc.Close()
		conns[i], ccs[i] = echo.NewClient(cc), cc
	}
	c := &cell{Subject: subject, Scenario: scenario, X: x, Window: m.window}
	total := 0.0
	cum := make([]float64, len(streams))
	for i, s := range streams {
		total += s.rate
		cum[i] = total
	}
	var mds [tenants][levels]metadata.MD
	for t := range tenants {
		for k := range overload.Criticality(levels) {
			mds[t][k] = metadata.Pairs(bench.TenantHeader, tenantName(t), overload.Header, k.String(), "x-failsafe-priority", failsafePriority(k))
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	call := func(at time.Time, s stream, measured bool) {
		defer wg.Done()
		ctx, cancel := context.WithDeadline(context.Background(), at.Add(deadline))
		defer cancel()
		ctx = metadata.NewOutgoingContext(ctx, mds[s.tenant][s.class])
		var err error
		if s.wait {
			err = ccs[s.tenant].Invoke(ctx, waitMethod, wrapperspb.String("x"), new(wrapperspb.StringValue))
		} else {
			_, err = conns[s.tenant].Say(ctx, wrapperspb.String("x"))
		}
		lat := time.Since(at)
		if !measured {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		c.Offered[s.class]++
		c.Asked[s.tenant]++
		if s.wait {
			c.WaitAsked++
			if err == nil && lat <= deadline {
				c.WaitServed++
				c.WaitLat.Record(lat)
			}
		}
		switch code := status.Code(err); {
		case err == nil && lat <= deadline:
			c.OK[s.class]++
			c.Served[s.tenant]++
			c.Lat[s.class].Record(lat)
			c.All.Record(lat)
		case code == codes.DeadlineExceeded || err == nil || errors.Is(err, context.DeadlineExceeded):
			c.Timeout[s.class]++
			c.TTimeout[s.tenant]++
		default:
			c.Refused[s.class]++
			c.TRefused[s.tenant]++
		}
	}
	start := time.Now()
	from, end := start.Add(m.warmup), start.Add(m.warmup+m.window)
	next := start
	for {
		next = next.Add(time.Duration(rand.ExpFloat64() / total * float64(time.Second)))
		if next.After(end) {
			break
		}
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		measured := !next.Before(from)
		if measured {
			c.Lag.Record(time.Since(next))
		}
		r := rand.Float64() * total
		i := 0
		for i < len(cum)-1 && cum[i] < r {
			i++
		}
		wg.Add(1)
		go call(next, streams[i], measured)
	}
	wg.Wait()
	c.Server, err = srv.stop()
	c.Wall = time.Since(born)
	return c, err
}

func tenantName(i int) string { return "tenant-" + strconv.Itoa(i) }

// failsafePriority is x-failsafe-priority for a criticality: the inverse
// of overload.FromFailsafe.
func failsafePriority(c overload.Criticality) string {
	return strconv.Itoa([levels]int{0, 1, 3, 4}[c])
}

// mixOf is load x (in capacities) over the class shares and the tenants
// alike.
func (m *measurer) mixOf(x float64) []stream {
	var ss []stream
	for k, share := range m.shares { // most critical first
		for t := range tenants {
			ss = append(ss, stream{rate: x * m.capacity * share / tenants, class: overload.CriticalPlus - overload.Criticality(k), tenant: t})
		}
	}
	return ss
}

// closedLoop keeps n calls in flight on a fresh server of subject and
// returns the calls/s completed in window after warmup.
func (m *measurer) closedLoop(subject string, n int, warmup, window time.Duration) (float64, error) {
	srv, err := startServer("", serverConfig{Subject: subject, CPU: m.serverCPU, Steps: m.steps, Spin: m.spin, Procs: m.serverProcs})
	if err != nil {
		return 0, err
	}
	cc, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_, _ = srv.stop()
		return 0, err
	}
	defer cc.Close()
	client := echo.NewClient(cc)
	from := time.Now().Add(warmup)
	end := from.Add(window)
	var mu sync.Mutex
	var done int
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				_, err := client.Say(context.Background(), wrapperspb.String("x"))
				if t := time.Now(); err == nil && t.After(from) && t.Before(end) {
					mu.Lock()
					done++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if _, err := srv.stop(); err != nil {
		return 0, err
	}
	return float64(done) / window.Seconds(), nil
}
