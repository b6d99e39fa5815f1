package exampleserver_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/examples/server/exampleserver/exampleservertest"
	"github.com/tollgate/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func noEnv(string) string { return "" }

func parse(t *testing.T, getenv func(string) string, args ...string) exampleserver.Config {
	t.Helper()
	return exampleservertest.Parse(t, getenv, args...)
}

// start runs Serve on a loopback port until the test ends (or Stop).
func start(t *testing.T, cfg exampleserver.Config) *exampleservertest.Server {
	t.Helper()
	return exampleservertest.Start(t, cfg, nil)
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func say(ctx context.Context, c *echo.Client, tenant string) (metadata.MD, error) {
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
	}
	var trailer metadata.MD
	_, err := c.Say(ctx, wrapperspb.String("hi"), grpc.Trailer(&trailer))
	return trailer, err
}

func TestParseFlags(t *testing.T) {
	cfg := parse(t, noEnv)
	want := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 10, Period: time.Second}
	if cfg.Addr != "127.0.0.1:50051" || cfg.Limit != want || cfg.TenantHeader != "x-tenant" ||
		cfg.FailMode != engine.FailOpen || cfg.RedisURL != "" || cfg.RedisClusterAddrs != nil {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg = parse(t, func(k string) string {
		return map[string]string{exampleserver.EnvRedisClusterAddrs: " 10.0.0.1:7000, 10.0.0.2:7000 ,"}[k]
	}, "-algorithm", "gcra", "-rate", "5", "-period", "1m", "-burst", "2", "-fail-mode", "local", "-tenant-header", "x-org")
	want = tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 5, Period: time.Minute, Burst: 2}
	if cfg.Limit != want || cfg.FailMode != engine.FailLocal || cfg.TenantHeader != "x-org" ||
		strings.Join(cfg.RedisClusterAddrs, "|") != "10.0.0.1:7000|10.0.0.2:7000" {
		t.Fatalf("parsed: %+v", cfg)
	}

	for _, bad := range [][]string{
		{"-algorithm", "leaky"},
		{"-fail-mode", "maybe"},
		{"-rate", "0"},
		{"-period", "0s"},
		{"-flaky", "1.5"},
		{"stray"},
		{"-algorithm", "fixed_window", "-burst", "5"},
		{"-algorithm", "sliding_window", "-burst", "5"},
		{"-admin-tls-cert", "c.pem", "-admin-tls-key", "k.pem"}, // no -admin-addr
	} {
		if _, err := exampleserver.ParseFlags(bad, noEnv, io.Discard); err == nil {
			t.Errorf("ParseFlags(%q) accepted", bad)
		}
	}
	both := func(string) string { return "x" }
	if _, err := exampleserver.ParseFlags(nil, both, io.Discard); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("both Redis variables set: %v", err)
	}
	var usage bytes.Buffer
	if _, err := exampleserver.ParseFlags([]string{"-h"}, noEnv, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "REDIS_URL") {
		t.Errorf("-h: %v, usage %q", err, usage.String())
	}
	// flag takes a backquoted word of the usage text for the value's name:
	// every value is named by its type.
	if !strings.Contains(usage.String(), "  -rate int\n") || strings.Contains(usage.String(), "`") {
		t.Errorf("-h names -rate's value oddly:\n%s", usage.String())
	}
}

// TestMemoryStore drives the server on its embedded default: per-tenant
// quotas, the denial's details, the missing tenant, the unlimited health
// service, a stream, then a clean shutdown.
func TestMemoryStore(t *testing.T) {
	s := start(t, parse(t, noEnv, "-rate", "3", "-period", "1h"))
	cc := dial(t, s.Addr)
	c := echo.NewClient(cc)
	ctx := t.Context()

	for _, tenant := range []string{"a", "b"} {
		for i := range 3 {
			tr, err := say(ctx, c, tenant)
			if err != nil {
				t.Fatalf("tenant %s call %d: %v", tenant, i, err)
			}
			if got, want := tr.Get(fields.LegacyRemaining), fmt.Sprint(2-i); len(got) != 1 || got[0] != want {
				t.Fatalf("tenant %s call %d: remaining %q, want %s", tenant, i, got, want)
			}
		}
		_, err := say(ctx, c, tenant)
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), exampleserver.RuleName) {
			t.Fatalf("tenant %s over quota: %v", tenant, err)
		}
		var retry *errdetails.RetryInfo
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				retry = ri
			}
		}
		// 3 per hour: the next token comes within 20 minutes.
		if d := retry.GetRetryDelay().AsDuration(); d <= 0 || d > 20*time.Minute {
			t.Fatalf("tenant %s: RetryInfo %v", tenant, retry)
		}
	}

	if _, err := say(ctx, c, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no tenant: %v, want InvalidArgument", err)
	}

	// The health service is skipped by the limiter: no tenant needed, no
	// quota spent.
	hc := healthpb.NewHealthClient(cc)
	for range 10 {
		for _, svc := range []string{"", echo.ServiceName} {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health %q: %v %v", svc, resp, err)
			}
		}
	}

	// Streams are limited at open, under the same rule.
	stream, err := c.Count(metadata.AppendToOutgoingContext(ctx, "x-tenant", "c"), 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := stream.Recv()
		if i < 2 && err != nil || i == 2 && err != io.EOF {
			t.Fatalf("Count message %d: %v", i, err)
		}
	}
	if got := stream.Trailer().Get(fields.LegacyRemaining); len(got) != 1 || got[0] != "2" {
		t.Fatalf("Count trailer remaining %q, want 2", got)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	log := s.Log.String()
	for _, want := range []string{
		"store: in-process memory (set REDIS_URL, REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS for Redis)",
		"rule per-tenant: token_bucket 3/1h0m0s burst 3",
		"listening on " + s.Addr,
		"shutting down",
		"stopped",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestReplicasShareRedisQuota runs two servers on one Redis, the way a
// fleet does, and hammers one tenant through both: they admit the tenant's
// quota exactly once between them. It runs on a single node and on a
// Cluster, selected through the environment variables.
func TestReplicasShareRedisQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) map[string]string
		log  string
	}{
		{"single", func(t *testing.T) map[string]string {
			return map[string]string{exampleserver.EnvRedisURL: "redis://" + redistest.Single(t).Addr()}
		}, "store: Redis at "},
		{"cluster", func(t *testing.T) map[string]string {
			return map[string]string{exampleserver.EnvRedisClusterAddrs: strings.Join(redistest.SharedCluster(t).Addrs, ",")}
		}, "store: Redis Cluster seeded by "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			const quota, perServer, workers = 25, 40, 8
			cfg := parse(t, func(k string) string { return env[k] }, "-rate", fmt.Sprint(quota), "-period", "1h", "-fail-mode", "closed", "-store-timeout", "10s")
			servers := []*exampleservertest.Server{start(t, cfg), start(t, cfg)}
			tenant := redistest.KeyPrefix(t) + "tenant"
			var (
				mu    sync.Mutex
				count = map[codes.Code]int{}
				wg    sync.WaitGroup
			)
			for _, s := range servers {
				c := echo.NewClient(dial(t, s.Addr))
				for range workers {
					wg.Go(func() {
						for range perServer / workers {
							_, err := say(t.Context(), c, tenant)
							mu.Lock()
							count[status.Code(err)]++
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			if count[codes.OK] != quota || count[codes.ResourceExhausted] != 2*perServer-quota || len(count) != 2 {
				t.Fatalf("outcomes %v, want %d OK and %d ResourceExhausted", count, quota, 2*perServer-quota)
			}
			for _, s := range servers {
				if err := s.Stop(); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(s.Log.String(), tc.log) || strings.Contains(s.Log.String(), "warning") {
					t.Fatalf("log:\n%s", s.Log.String())
				}
			}
		})
	}
}

// TestUnreachableRedisFailsClosed starts the server on a Redis address
// nobody listens on: it starts anyway, warns, and the fail mode applies.
func TestUnreachableRedisFailsClosed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	env := map[string]string{exampleserver.EnvRedisURL: "redis://" + dead + "?dial_timeout=100ms"}
	s := start(t, parse(t, func(k string) string { return env[k] }, "-fail-mode", "closed"))
	if _, err := say(t.Context(), echo.NewClient(dial(t, s.Addr)), "a"); status.Code(err) != codes.Unavailable {
		t.Fatalf("store down, fail closed: %v, want Unavailable", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Log.String(), "warning: Redis does not answer") {
		t.Fatalf("no warning in log:\n%s", s.Log.String())
	}
}

// TestShutdownIsBounded leaves a stream open across the shutdown: Serve
// waits the shutdown timeout, then cancels the stream and returns.
func TestShutdownIsBounded(t *testing.T) {
	cfg := parse(t, noEnv, "-shutdown-timeout", "100ms")
	s := start(t, cfg)
	c := echo.NewClient(dial(t, s.Addr))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "a")
	stream, err := c.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One round trip proves the stream is open on the server.
	if err := stream.Send(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := stream.Recv(); err == nil || err == io.EOF {
		t.Fatalf("stream still open after the shutdown: %v", err)
	}
	if !strings.Contains(s.Log.String(), "cancelling them") {
		t.Fatalf("log:\n%s", s.Log.String())
	}
}

// TestServeReportsListenerFailure: a listener that fails makes Serve return
// an error rather than hang.
func TestServeReportsListenerFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	err = exampleserver.Serve(t.Context(), parse(t, noEnv), lis, io.Discard)
	if err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}
