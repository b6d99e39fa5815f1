// Command client drives the example server (examples/server) with many
// calls at once, spread over tenants, and prints what the rate limiter did
// with them:
//
//	go run ./examples/client -addr 127.0.0.1:50051 -n 1000 -c 16 -tenants a,b
//
// It first waits up to -wait for the server to report the echo service as
// serving (gRPC health), so it can be started before the server. It exits
// with status 1 when no call got an answer from the limiter (every call
// failed with another error: the server is down, or not this server).
//
// Every call carries a request id stamped by idempotency's client
// interceptors and runs under a gRPC retry policy (service config) that
// retries UNAVAILABLE. Because every attempt of a call carries the same id,
// a retry of a call the limiter already admitted is replayed, not debited
// again. RESOURCE_EXHAUSTED, the limiter's denial, is not retried unless
// -retry-denied is given: it is the outcome this tool counts, a client over
// its quota that retries only adds load, and grpc-go also reports some local
// failures (a message over the size limit) with that code. With
// -retry-denied, gRPC waits exactly the grpc-retry-pushback-ms the denial
// carries before its next attempt.
//
// Progress goes to stderr once per -progress interval; at the end a table
// per tenant goes to stdout: calls admitted, denied, replayed (admitted
// again under an id already admitted, without a debit), failed with another
// error, the p50 and p99 latency of a call (all attempts included), and the
// longest wait a denial asked for (its errdetails.RetryInfo).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/internal/cmdmain"
)

func main() {
	cmdmain.Run("client", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}

// config is what the flags say.
type config struct {
	addr         string
	n, c         int
	tenants      []string
	tenantHeader string
	method       string // "say" or "count"
	timeout      time.Duration
	maxAttempts  int
	retryDenied  bool
	progress     time.Duration
	wait         time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var tenants string
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:50051", "server address")
	fs.IntVar(&cfg.n, "n", 1000, "number of calls")
	fs.IntVar(&cfg.c, "c", 16, "calls in flight at once")
	fs.StringVar(&tenants, "tenants", "a,b", "comma-separated tenants; call i goes to tenant i mod their number")
	fs.StringVar(&cfg.tenantHeader, "tenant-header", "x-tenant", "metadata key that names the tenant")
	fs.StringVar(&cfg.method, "method", "say", "say (unary) or count (server stream of 3 messages)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of one call, all attempts included")
	fs.IntVar(&cfg.maxAttempts, "max-attempts", 4, "attempts per call under the retry policy, 2 to 5 (gRPC caps it at 5)")
	fs.BoolVar(&cfg.retryDenied, "retry-denied", false, "also retry RESOURCE_EXHAUSTED, waiting the server's grpc-retry-pushback-ms")
	fs.DurationVar(&cfg.progress, "progress", time.Second, "interval of the progress lines on stderr")
	fs.DurationVar(&cfg.wait, "wait", 30*time.Second, "how long to wait for the server to be serving before the first call (0: do not wait)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, t := range strings.Split(tenants, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.tenants = append(cfg.tenants, t)
		}
	}
	switch {
	case cfg.n < 0:
		return config{}, fmt.Errorf("-n %d: want at least 0", cfg.n)
	case cfg.c < 1:
		return config{}, fmt.Errorf("-c %d: want at least 1", cfg.c)
	case len(cfg.tenants) == 0:
		return config{}, errors.New("-tenants: want at least one tenant")
	case cfg.method != "say" && cfg.method != "count":
		return config{}, fmt.Errorf("-method %q: want say or count", cfg.method)
	case cfg.maxAttempts < 2 || cfg.maxAttempts > 5:
		return config{}, fmt.Errorf("-max-attempts %d: want 2 to 5", cfg.maxAttempts)
	case cfg.timeout <= 0 || cfg.progress <= 0:
		return config{}, errors.New("-timeout and -progress must be positive")
	case cfg.wait < 0:
		return config{}, fmt.Errorf("-wait %s: want 0 or more", cfg.wait)
	}
	return cfg, nil
}

// serviceConfig is the gRPC service config with the retry policy for every
// Echo method. gRPC's retry runs below the client interceptors, so all the
// attempts of one call carry the id the idempotency interceptor stamped.
func serviceConfig(cfg config) string {
	codes := `"UNAVAILABLE"`
	if cfg.retryDenied {
		codes += `, "RESOURCE_EXHAUSTED"`
	}
	return fmt.Sprintf(`{"methodConfig": [{
		"name": [{"service": %q}],
		"retryPolicy": {
			"maxAttempts": %d,
			"initialBackoff": "0.05s",
			"maxBackoff": "1s",
			"backoffMultiplier": 2,
			"retryableStatusCodes": [%s]
		}
	}]}`, echo.ServiceName, cfg.maxAttempts, codes)
}

// run parses args, drives the server and prints the summary to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(cfg.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig(cfg)),
		// Reconnect within a second rather than gRPC's default of up to
		// two minutes, so a server that comes up is found soon.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
		}}),
		// First in the chain, so that any retrying interceptor added
		// after it would reuse the id too.
		grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(idempotency.StreamClientInterceptor()),
	)
	if err != nil {
		return err
	}
	defer cc.Close()
	if cfg.wait > 0 {
		if err := waitForServer(ctx, cc, cfg, stderr); err != nil {
			return err
		}
	}
	start := time.Now()
	res := drive(ctx, echo.NewClient(cc), cfg, stderr)
	printSummary(stdout, res, time.Since(start))
	if calls, answered := res.answered(); calls > 0 && answered == 0 {
		return fmt.Errorf("none of the %d calls got an answer from the limiter (see the errors above)", calls)
	}
	return nil
}

// waitForServer waits up to cfg.wait until the server's health service
// reports the echo service as serving, reconnecting as often as gRPC's
// backoff allows.
func waitForServer(ctx context.Context, cc *grpc.ClientConn, cfg config, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	health := healthpb.NewHealthClient(cc)
	req := &healthpb.HealthCheckRequest{Service: echo.ServiceName}
	said := false
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
		resp, err := health.Check(attempt, req, grpc.WaitForReady(true))
		cancelAttempt()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if !said {
			fmt.Fprintf(stderr, "waiting up to %s for %s at %s to be serving\n", cfg.wait, echo.ServiceName, cfg.addr)
			said = true
		}
		if err == nil {
			err = fmt.Errorf("health: %s", resp.GetStatus())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server at %s was not serving within -wait %s: %v", cfg.addr, cfg.wait, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tally is what happened to one tenant's calls.
type tally struct {
	admitted, denied, replayed, errors int
	errorCodes                         map[codes.Code]int
	latencies                          []time.Duration
	maxRetryAfter                      time.Duration
}

func (t *tally) calls() int { return t.admitted + t.denied + t.replayed + t.errors }

// answered counts the calls made, and those the limiter answered (admitted,
// replayed or denied), over every tenant.
func (r results) answered() (calls, answered int) {
	for _, t := range r.by {
		calls += t.calls()
		answered += t.admitted + t.replayed + t.denied
	}
	return calls, answered
}

// results maps each tenant to its tally, in the order of cfg.tenants.
type results struct {
	tenants []string
	by      map[string]*tally
}

// outcome of one call.
type outcome struct {
	tenant     string
	latency    time.Duration
	replayed   bool
	err        error
	retryAfter time.Duration
}

// drive makes cfg.n calls, cfg.c at a time, until done or ctx ends; calls
// not started when ctx ends are not made.
func drive(ctx context.Context, client *echo.Client, cfg config, progress io.Writer) results {
	res := results{tenants: cfg.tenants, by: map[string]*tally{}}
	for _, t := range cfg.tenants {
		res.by[t] = &tally{errorCodes: map[codes.Code]int{}}
	}
	var (
		mu                              sync.Mutex
		next                            atomic.Int64
		done, admitted, denied, replays atomic.Int64
		wg                              sync.WaitGroup
	)
	record := func(o outcome) {
		mu.Lock()
		defer mu.Unlock()
		t := res.by[o.tenant]
		t.latencies = append(t.latencies, o.latency)
		switch code := status.Code(o.err); {
		case o.err == nil && o.replayed:
			t.replayed++
			replays.Add(1)
		case o.err == nil:
			t.admitted++
			admitted.Add(1)
		case code == codes.ResourceExhausted:
			t.denied++
			denied.Add(1)
			t.maxRetryAfter = max(t.maxRetryAfter, o.retryAfter)
		default:
			t.errors++
			t.errorCodes[code]++
		}
		done.Add(1)
	}

	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(cfg.progress)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-stopProgress:
				return
			case now := <-tick.C:
				elapsed := now.Sub(start)
				d := done.Load()
				fmt.Fprintf(progress, "[%5.1fs] %d/%d calls (%.0f/s): %d admitted, %d replayed, %d denied, %d errors\n",
					elapsed.Seconds(), d, cfg.n, float64(d)/elapsed.Seconds(), admitted.Load(), replays.Load(), denied.Load(), d-admitted.Load()-replays.Load()-denied.Load())
			}
		}
	}()

	for range cfg.c {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(cfg.n) {
					return
				}
				record(call(ctx, client, cfg, cfg.tenants[i%int64(len(cfg.tenants))]))
			}
		})
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	return res
}

// call makes one logical call for tenant and reports its outcome.
func call(ctx context.Context, client *echo.Client, cfg config, tenant string) outcome {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, cfg.tenantHeader, tenant)
	var trailer metadata.MD
	start := time.Now()
	var err error
	switch cfg.method {
	case "say":
		_, err = client.Say(ctx, wrapperspb.String("ping"), grpc.Trailer(&trailer))
	case "count":
		err = countAll(ctx, client, 3, &trailer)
	}
	o := outcome{tenant: tenant, latency: time.Since(start), err: err}
	o.replayed = slices.Contains(trailer.Get(fields.Replayed), "1")
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			o.retryAfter = ri.GetRetryDelay().AsDuration()
		}
	}
	return o
}

// countAll calls Count for n messages and reads them all.
func countAll(ctx context.Context, client *echo.Client, n int, trailer *metadata.MD) error {
	stream, err := client.Count(ctx, n, grpc.Trailer(trailer))
	if err != nil {
		return err
	}
	got := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		got++
	}
	if got != n {
		return status.Errorf(codes.DataLoss, "count: %d messages, want %d", got, n)
	}
	return nil
}

// percentile returns the p-th percentile (0 < p ≤ 1) of sorted durations,
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// printSummary writes the per-tenant table, a total line and the error codes
// seen.
func printSummary(w io.Writer, res results, elapsed time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tcalls\tadmitted\tdenied\treplayed\terrors\tp50\tp99\tmax retry-after\t")
	total := tally{errorCodes: map[codes.Code]int{}}
	for _, name := range res.tenants {
		t := res.by[name]
		writeRow(tw, name, t)
		total.admitted += t.admitted
		total.denied += t.denied
		total.replayed += t.replayed
		total.errors += t.errors
		total.latencies = append(total.latencies, t.latencies...)
		total.maxRetryAfter = max(total.maxRetryAfter, t.maxRetryAfter)
		for c, n := range t.errorCodes {
			total.errorCodes[c] += n
		}
	}
	if len(res.tenants) > 1 {
		writeRow(tw, "all", &total)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d calls in %s (%.0f calls/s)\n", total.calls(), elapsed.Round(time.Millisecond), float64(total.calls())/elapsed.Seconds())
	if len(total.errorCodes) > 0 {
		var parts []string
		for c, n := range total.errorCodes {
			parts = append(parts, fmt.Sprintf("%s: %d", c, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "errors by code: %s\n", strings.Join(parts, ", "))
	}
}

func writeRow(w io.Writer, name string, t *tally) {
	slices.Sort(t.latencies)
	retryAfter := "-"
	if t.denied > 0 {
		retryAfter = t.maxRetryAfter.Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, t.calls(), t.admitted, t.denied, t.replayed, t.errors,
		roundLatency(percentile(t.latencies, 0.50)), roundLatency(percentile(t.latencies, 0.99)), retryAfter)
}

// roundLatency keeps three significant figures or so.
func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
