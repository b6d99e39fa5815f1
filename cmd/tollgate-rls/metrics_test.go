package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/rls"
)

// TestMetricsAddr runs the command with -metrics-addr, makes two admitted
// calls and one refused, and finds the decisions in the Prometheus scrape
// under the interceptors' metric name.
func TestMetricsAddr(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "shop.yaml", limitYAML("shop", 2))
	cc, logs, _ := startCommand(t, nil, "-config", dir, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0")
	callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer callCancel()
	for i := range 3 {
		resp, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(callCtx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}}},
		}}, grpc.WaitForReady(true))
		want := map[bool]pb.RateLimitResponse_Code{true: pb.RateLimitResponse_OK, false: pb.RateLimitResponse_OVER_LIMIT}[i < 2]
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d: %v %v, want %v", i, resp, err, want)
		}
	}
	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]string{"allowed": "2", "denied": "1"} {
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			found = found || strings.HasPrefix(line, "tollgate_decisions_total{") &&
				strings.Contains(line, `tollgate_outcome="`+outcome+`"`) && strings.HasSuffix(line, "} "+want)
		}
		if !found {
			t.Errorf("no tollgate_decisions_total sample of %s %s in:\n%s", want, outcome, body)
		}
	}
}

// TestExampleConfig loads the configuration the README runs the command
// with.
func TestExampleConfig(t *testing.T) {
	conf, err := rls.LoadDir("../../examples/rls/config")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(conf.Domains(), ","); got != "api" {
		t.Fatalf("domains %q, want api", got)
	}
}
