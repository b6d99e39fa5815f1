package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func writeFile(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func limitYAML(domain string, n int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: day\n      requests_per_unit: " + strconv.Itoa(n) + "\n"
}

// TestRunReloadsOnSIGHUP runs the command's server in-process on each
// store the environment can name, sends it SIGHUP with a new file,
// then with a bad one, while calls keep running: none fails, the new limit
// applies, the bad file is logged with its line and the old configuration
// keeps serving. Health and reflection answer.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"memory", func(t *testing.T) map[string]string { return nil }},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{envRedisURL: "redis://" + redistest.Single(t).Addr()}
		}},
		{"cluster", func(t *testing.T) map[string]string {
			return map[string]string{envRedisClusterAddrs: strings.Join(redistest.SharedCluster(t).Addrs, ",")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testReload(t, tc.env(t)) })
	}
}

// startCommand serves the command's server in-process with args and env
// until the test ends, and returns a connection to it, its log and its
// SIGHUP channel.
func startCommand(t *testing.T, env map[string]string, args ...string) (*grpc.ClientConn, *grpctest.Log, chan<- os.Signal) {
	t.Helper()
	cfg, err := parseFlags(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		t.Fatal(err)
	}
	logs := &grpctest.Log{}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, lis, hup, logs) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return cc, logs, hup
}

func testReload(t *testing.T, env map[string]string) {
	dir := t.TempDir()
	domain := strings.ReplaceAll(redistest.KeyPrefix(t), ":", "_")
	writeFile(t, dir, "shop.yaml", limitYAML(domain, 3))
	cc, logs, hup := startCommand(t, env, "-config", dir, "-addr", "127.0.0.1:0", "-response-headers", "-store-timeout", "5s")
	client := pb.NewRateLimitServiceClient(cc)
	callCtx, callCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer callCancel()

	hres, err := healthpb.NewHealthClient(cc).Check(callCtx, &healthpb.HealthCheckRequest{Service: serviceName}, grpc.WaitForReady(true))
	if err != nil || hres.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hres, err)
	}
	assertReflection(t, callCtx, cc)

	ask, admitted := tenantCalls(t, callCtx, client, domain)
	if n := admitted("a", 5); n != 3 {
		t.Fatalf("before reload: %d of 5 admitted, want 3", n)
	}
	resp, err := ask("h")
	if err != nil || len(resp.ResponseHeadersToAdd) != 3 || resp.ResponseHeadersToAdd[0].Value != "3" {
		t.Fatalf("headers: %v %v", resp, err)
	}

	// Callers keep calling through both reloads.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := ask("busy"); err != nil {
					failures.Add(1)
				}
			}
		}()
	}

	writeFile(t, dir, "shop.yaml", limitYAML(domain, 6))
	signalAndWait(t, hup, logs, "reloaded")
	if n := admitted("b", 8); n != 6 {
		t.Fatalf("after reload: %d of 8 admitted, want 6", n)
	}

	writeFile(t, dir, "broken.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n")
	signalAndWait(t, hup, logs, "reload rejected")
	if !strings.Contains(logs.String(), "broken.yaml:5: descriptor other.k: invalid rate limit unit") {
		t.Fatalf("the rejection does not name file, line and descriptor:\n%s", logs.String())
	}
	if n := admitted("c", 8); n != 6 {
		t.Fatalf("after a rejected reload: %d of 8 admitted, want 6 (the previous configuration)", n)
	}
	close(stop)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d calls failed during reloads", failures.Load())
	}
}

// signalAndWait sends SIGHUP on the channel serve reads (TestRunWiresSIGHUP
// proves that run connects the real signal to it) and waits for want to
// appear once more in the log.
func signalAndWait(t *testing.T, hup chan<- os.Signal, logs *grpctest.Log, want string) {
	t.Helper()
	before := logs.Count(want)
	hup <- syscall.SIGHUP
	logs.Await(t, want, before+1)
}

// TestRunWiresSIGHUP: run reloads on a real SIGHUP sent to the process.
func TestRunWiresSIGHUP(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", limitYAML("a", 1))
	cfg, err := parseFlags([]string{"-config", dir, "-addr", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs grpctest.Log
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &logs) }()
	logs.Await(t, "listening on", 1)
	writeFile(t, dir, "b.yaml", limitYAML("b", 1))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.Await(t, "reloaded "+dir+": domains a, b", 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func assertReflection(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), serviceName) {
		t.Fatalf("reflection lists %v, not %s", names, serviceName)
	}
}

func TestParseFlags(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"bad config type":       {nil, map[string]string{"CONFIG_TYPE": "CONSUL"}},
		"bad bool":              {nil, map[string]string{"SHADOW_MODE": "maybe"}},
		"memcache":              {nil, map[string]string{"BACKEND_TYPE": "memcache"}},
		"tls without cert":      {nil, map[string]string{"GRPC_SERVER_USE_TLS": "true"}},
		"sentinel one node":     {nil, map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster"}},
		"bad fail mode":         {[]string{"-config", "d", "-fail-mode", "maybe"}, nil},
		"two stores":            {[]string{"-config", "d"}, map[string]string{envRedisURL: "redis://x", envRedisClusterAddrs: "a:1"}},
		"sentinel nameless":     {[]string{"-config", "d"}, map[string]string{envRedisSentinelAddrs: "a:1"}},
		"extra args":            {[]string{"-config", "d", "x"}, nil},
		"no assignment reports": {[]string{"-config", "d", "-quota-assignment-reports", "0"}, nil},
		"negative rebalance":    {[]string{"-config", "d", "-quota-rebalance", "-1s"}, nil},
	} {
		if _, err := parseFlags(c.args, env(c.env), io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	c, err := parseFlags([]string{"-config", "d", "-fail-mode", "open"}, env(map[string]string{envRedisSentinelAddrs: "a:1, b:2", envRedisSentinelMaster: "mymaster"}), io.Discard)
	if err != nil || len(c.redis.SentinelAddrs) != 2 || c.redis.SentinelMaster != "mymaster" {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestFailModeFlag: the default answers Unavailable, and "error" still
// names it.
func TestFailModeFlag(t *testing.T) {
	for args, want := range map[string]rls.StoreFailAnswer{"": rls.AnswerUnavailable, "closed": rls.AnswerUnavailable, "error": rls.AnswerUnavailable, "open": rls.AnswerOK} {
		argv := []string{"-config", "d"}
		if args != "" {
			argv = append(argv, "-fail-mode", args)
		}
		c, err := parseFlags(argv, func(string) string { return "" }, io.Discard)
		if err != nil || c.storeFail != want {
			t.Errorf("-fail-mode %q: %v, %v; want %v", args, c.storeFail, err, want)
		}
	}
}

// tenantCalls returns ask, which asks client for one call of tenant in
// domain under ctx, and admitted, which counts how many of n such calls are
// OK (failing the test on an error).
func tenantCalls(t *testing.T, ctx context.Context, client pb.RateLimitServiceClient, domain string) (
	ask func(tenant string) (*pb.RateLimitResponse, error), admitted func(tenant string, n int) int) {
	ask = func(tenant string) (*pb.RateLimitResponse, error) {
		return client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}},
		}})
	}
	admitted = func(tenant string, n int) int {
		count := 0
		for range n {
			resp, err := ask(tenant)
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == pb.RateLimitResponse_OK {
				count++
			}
		}
		return count
	}
	return ask, admitted
}

// An empty configuration directory starts, with a warning that nothing is
// limited; the "listening on" line says how the listener serves.
func TestEmptyConfigWarns(t *testing.T) {
	_, logs, _ := startCommand(t, nil, "-config", t.TempDir(), "-addr", "127.0.0.1:0")
	logs.Await(t, "listening on", 1)
	if !strings.Contains(logs.String(), "holds no domain") || !strings.Contains(logs.String(), "(plaintext)") {
		t.Fatalf("log:\n%s\nwant a warning of no domain and the listener's mode", logs.String())
	}
}
