package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// gatewayServers are the two servers the Envoy Gateway tests start the
// same way: envoyproxy/ratelimit first, so that every expectation is
// checked on the reference, then tollgate-rls built as the image builds
// it.
func gatewayServers(t *testing.T) []string {
	t.Helper()
	ref, err := EnvoyRatelimitBin()
	if err != nil {
		t.Fatal(err)
	}
	tollgate, err := BuildTollgateRLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return []string{ref, tollgate}
}

func isReference(s *GatewayServer) bool { return s.Name != "ratelimit" }

// gatewayDomain is a RateLimitConfig as Envoy Gateway's controller writes
// one for a route: a route key, then the rule's keys.
func gatewayDomain(name, domain string, perMinute uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "httproute/default/api/rule/0/match/0", Value: "httproute/default/api/rule/0/match/0",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "rule-0-match-0", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: perMinute},
		}},
	}}}
}

// routeDescriptor is what Envoy sends for gatewayDomain's rule.
func routeDescriptor(user string) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "httproute/default/api/rule/0/match/0", Value: "httproute/default/api/rule/0/match/0"},
		{Key: "rule-0-match-0", Value: user},
	}}
}

// limitServed waits until a call in domain reports requestsPerUnit as its
// limit, and returns how long that took; it fails the test after bound.
func limitServed(t *testing.T, c pb.RateLimitServiceClient, domain string, requestsPerUnit uint32, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{routeDescriptor("probe")}})
		cancel()
		if err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == requestsPerUnit {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("limit %d not served %s after the push: %v %v", requestsPerUnit, bound, resp, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// servedBound is how long the tests let a pushed snapshot take to be
// served: the target is 1 s, and a busy machine gets a margin; the
// measured times are logged.
const servedBound = 5 * time.Second

// TestGatewayStartedAsEnvoyGatewayStartsIt starts envoyproxy/ratelimit,
// then tollgate-rls, with Envoy Gateway's environment and nothing else,
// an in-process xDS server and certificates made for the test, and checks
// each the same way: healthy before any configuration; a pushed snapshot
// served, then a new version; a broken one NACKed naming the resource,
// through the storm of resends, while the last good one serves; a client
// without a certificate; the metric families; Redis down at start.
func TestGatewayStartedAsEnvoyGatewayStartsIt(t *testing.T) {
	for _, bin := range gatewayServers(t) {
		t.Run(filepathBase(bin), func(t *testing.T) { testGateway(t, bin) })
	}
}

func filepathBase(bin string) string { return bin[strings.LastIndexByte(bin, '/')+1:] }

func testGateway(t *testing.T, bin string) {
	g, err := NewGateway()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	s, err := g.Start(bin, redisOptions.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	client, closeClient, err := s.Dial(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	domain := fmt.Sprintf("gw%d", time.Now().UnixNano())
	call := func(c pb.RateLimitServiceClient, user string) (*pb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{routeDescriptor(user)}})
	}

	// Before any configuration: healthy, and calls fail so that Envoy's
	// failure_mode_deny decides.
	if code, body, err := s.Get("/healthcheck"); code != 200 || err != nil {
		t.Fatalf("/healthcheck before any configuration: %d %q %v", code, body, err)
	}
	if _, err := call(client, "u"); err == nil || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("a call before any configuration: %v, want an error saying no configuration is loaded", err)
	}

	if err := g.Push("v1", gatewayDomain("default/eg/api", domain, 3)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: v1 served %s after the push", s.Name, limitServed(t, client, domain, 3, servedBound))
	admitted := 0
	for range 5 {
		if r, err := call(client, "alice"); err == nil && r.GetOverallCode() == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("alice: %d of 5 admitted, want 3", admitted)
	}
	if err := g.Push("v2", gatewayDomain("default/eg/api", domain, 7)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: v2 served %s after the push", s.Name, limitServed(t, client, domain, 7, servedBound))
	waitFor(t, "v2 acknowledged", func() bool { return g.Acked("v2") })

	// Broken snapshots: NACKed with the resource named, v2 still serving,
	// through the resends.
	broken := map[string]*rlsconf.RateLimitConfig{
		"unknown unit":        {Name: "default/eg/bad", Domain: domain + "x", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}}},
		"empty key":           {Name: "default/eg/bad", Domain: domain + "x", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}},
		"unlimited with unit": {Name: "default/eg/bad", Domain: domain + "x", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_SECOND}}}},
		"domain twice":        gatewayDomain("default/eg/bad", domain, 1),
	}
	i := 0
	for what, bad := range broken {
		i++
		version := fmt.Sprintf("bad%d", i)
		before, _ := g.Nacks()
		if err := g.Push(version, gatewayDomain("default/eg/api", domain, 7), bad); err != nil {
			t.Fatal(err)
		}
		waitFor(t, what+" NACKed", func() bool { n, _ := g.Nacks(); return n > before })
		_, msg := g.Nacks()
		if !strings.Contains(msg, "default/eg/bad") && !strings.Contains(msg, "default/eg/api") {
			t.Errorf("%s: the NACK says %q, without the resource's name", what, msg)
		}
		t.Logf("%s: %s NACKed: %s", s.Name, what, msg)
		// The storm: the xDS server resends the rejected snapshot until the
		// next version; calls are answered with v2 all along.
		stormEnd := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(stormEnd) {
			r, err := call(client, "probe-"+what)
			if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 7 {
				t.Fatalf("%s: during the NACKs: %v %v, want v2's limit of 7", what, r, err)
			}
		}
		n, _ := g.Nacks()
		t.Logf("%s: %d NACKs so far", s.Name, n)
		if g.Acked(version) {
			t.Fatalf("%s: the broken snapshot %s was acknowledged", what, version)
		}
	}
	if err := g.Push("v3", gatewayDomain("default/eg/api", domain, 11)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: v3 served %s after the NACK storm", s.Name, limitServed(t, client, domain, 11, servedBound))

	// A client without a certificate.
	bare, closeBare, err := s.Dial(false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBare()
	_, err = call(bare, "nocert")
	if isReference(s) {
		// envoyproxy/ratelimit requires client certificates only with
		// GRPC_CLIENT_TLS_CACERT, which Envoy Gateway does not set.
		t.Logf("%s: a client without a certificate: %v (answered: the reference does not require one with this environment)", s.Name, err)
	} else if status.Code(err) != codes.Unavailable || err == nil {
		t.Fatalf("%s: a client without a certificate: %v, want the handshake refused", s.Name, err)
	}

	// The metric families of envoyproxy/ratelimit's default mapping.
	// envoyproxy/ratelimit flushes its statistics every 10 s
	// (STATS_FLUSH_INTERVAL).
	var body string
	deadline := time.Now().Add(25 * time.Second)
	for {
		_, b, err := s.Get("/metrics")
		if body = b; err == nil && missingFamilies(body) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /metrics lacks %s:\n%s", s.Name, missingFamilies(body), body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Redis down at start.
	dead := deadAddr(t)
	down, err := g.Start(bin, dead)
	if isReference(s) {
		// The reference exits, naming the address.
		if err == nil {
			select {
			case <-down.Exited():
			case <-time.After(30 * time.Second):
				down.Close()
				t.Fatal("the reference kept running with Redis down at start")
			}
			err = fmt.Errorf("exit %d: %s", down.ExitCode(), down.Log.String())
		}
		if !strings.Contains(err.Error(), dead) {
			t.Fatalf("the reference with Redis down at start: %v, want an exit naming %s", err, dead)
		}
		t.Logf("%s with Redis down at start: exits, naming %s", s.Name, dead)
		return
	}
	if err != nil {
		t.Fatalf("tollgate-rls with Redis down at start: %v", err)
	}
	defer down.Close()
	downClient, closeDown, err := down.Dial(true)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDown()
	// Healthy, configured over xDS, and answering UNAVAILABLE (Envoy's
	// failure_mode_deny decides) until Redis answers.
	waitFor(t, "configuration served with Redis down", func() bool {
		_, err := call(downClient, "x")
		return status.Code(err) == codes.Unavailable && !strings.Contains(err.Error(), "no rate limit configuration loaded")
	})
	if !strings.Contains(down.Log.String(), dead) {
		t.Fatalf("the log does not name %s:\n%s", dead, down.Log.String())
	}
}

// referenceFamilies are metric families envoyproxy/ratelimit's default
// mapping exports that dashboards and alerts read.
var referenceFamilies = []string{
	"ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_within_limit",
	"ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_over_limit",
	"ratelimit_service_config_load_success", "ratelimit_service_total_requests",
}

// missingFamilies names the families body lacks.
func missingFamilies(body string) string {
	var missing []string
	for _, f := range referenceFamilies {
		if !strings.Contains(body, "\n"+f+"{") && !strings.Contains(body, "\n"+f+" ") {
			missing = append(missing, f)
		}
	}
	return strings.Join(missing, ", ")
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// waitFor waits up to 20 s for cond, failing the test naming what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatewayConformance is the snapshot both servers are fed for the answer
// comparison: nested route descriptors as Envoy Gateway writes them, a
// wildcard value, unlimited, shadow mode, replaces, detailed metrics, and
// limits small enough to be reached.
func gatewayConformance(domain string) *rlsconf.RateLimitConfig {
	lim := func(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
	}
	return &rlsconf.RateLimitConfig{Name: "default/eg/conformance", Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "route", Value: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", RateLimit: lim(rlsconf.RateLimitUnit_MINUTE, 9)},
			{Key: "user", Value: "vip", RateLimit: lim(rlsconf.RateLimitUnit_HOUR, 20)},
			{Key: "path", Value: "/admin*", RateLimit: lim(rlsconf.RateLimitUnit_HOUR, 5)},
			{Key: "watch", ShadowMode: true, RateLimit: lim(rlsconf.RateLimitUnit_MINUTE, 4)},
			{Key: "plan", DetailedMetric: true, RateLimit: lim(rlsconf.RateLimitUnit_DAY, 12)},
		}},
		{Key: "tenant", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 6, Name: "tenant"}},
		{Key: "tenant_gold", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 15, Replaces: []*rlsconf.RateLimitReplace{{Name: "tenant"}}}},
		{Key: "health", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		// A minute, as every counted limit here: a second window would
		// reset between the two servers' calls when they straddle one.
		{Key: "ip", RateLimit: lim(rlsconf.RateLimitUnit_MINUTE, 1000)},
	}}
}

// randomRequest draws a request of 1 to 3 descriptors from
// gatewayConformance's shapes, hits_addend 1 to 3.
func randomRequest(rng *rand.Rand, domain string) *pb.RateLimitRequest {
	entry := func(kv ...string) *rlv3.RateLimitDescriptor {
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	shapes := []func() *rlv3.RateLimitDescriptor{
		func() *rlv3.RateLimitDescriptor { return entry("route", "api", "user", pick("ann", "bob", "vip")) },
		func() *rlv3.RateLimitDescriptor {
			return entry("route", "api", "path", pick("/admin", "/admin/users", "/home"))
		},
		func() *rlv3.RateLimitDescriptor { return entry("route", "api", "watch", pick("w1", "w2")) },
		func() *rlv3.RateLimitDescriptor { return entry("route", "api", "plan", pick("free", "pro")) },
		func() *rlv3.RateLimitDescriptor { return entry("tenant", pick("t1", "t2")) },
		func() *rlv3.RateLimitDescriptor { return entry("tenant_gold", pick("t1", "t2")) },
		func() *rlv3.RateLimitDescriptor { return entry("health", "x") },
		func() *rlv3.RateLimitDescriptor { return entry("ip", "10.0.0.1") },
		func() *rlv3.RateLimitDescriptor { return entry("route", "other", "user", "ann") },
	}
	req := &pb.RateLimitRequest{Domain: domain, HitsAddend: uint32(1 + rng.IntN(3))}
	for range 1 + rng.IntN(3) {
		req.Descriptors = append(req.Descriptors, shapes[rng.IntN(len(shapes))]())
	}
	return req
}

// TestGatewayAnswersAsReference feeds both servers, started as Envoy
// Gateway starts them, the same snapshot, and sends each the same 300
// random requests (hits_addend 1 to 3) in the same order: every answer's
// codes, limits, remaining counts and resets are the same.
func TestGatewayAnswersAsReference(t *testing.T) {
	bins := gatewayServers(t)
	g, err := NewGateway()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	domain := fmt.Sprintf("conf%d", time.Now().UnixNano())
	var clients []pb.RateLimitServiceClient
	for _, bin := range bins {
		s, err := g.Start(bin, redisOptions.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c, closeC, err := s.Dial(true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeC)
		clients = append(clients, c)
	}
	if err := g.Push("v1", gatewayConformance(domain)); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		waitFor(t, "the snapshot served", func() bool {
			r, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "health", Value: "x"}}}}})
			return err == nil && r.GetStatuses()[0].GetLimitRemaining() > 0
		})
	}
	// Minute windows: keep the run inside one (it takes a few seconds).
	if s := time.Now().Second(); s > 40 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	rng := rand.New(rand.NewPCG(43, uint64(time.Now().UnixNano())))
	differ := 0
	for n := range 300 {
		req := randomRequest(rng, domain)
		var resps [2]*pb.RateLimitResponse
		var secs [2]int64
		for i, c := range clients {
			secs[i] = time.Now().Unix()
			r, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("request %d to %s: %v", n, bins[i], err)
			}
			resps[i] = r
		}
		if d := answerDiff(resps[0], resps[1], secs[0] != secs[1] || time.Now().Unix() != secs[1]); d != "" {
			differ++
			t.Errorf("request %d %v:\n%s", n, req, d)
		}
	}
	t.Logf("%d of 300 answers differ", differ)
}

// answerDiff describes how b's answer differs from a's: the overall code,
// and each status's code, limit, remaining count and reset (a second
// apart when the calls straddled a second).
func answerDiff(a, b *pb.RateLimitResponse, straddled bool) string {
	var out []string
	if a.GetOverallCode() != b.GetOverallCode() {
		out = append(out, fmt.Sprintf("overall %s / %s", a.GetOverallCode(), b.GetOverallCode()))
	}
	if len(a.GetStatuses()) != len(b.GetStatuses()) {
		return fmt.Sprintf("%d statuses / %d", len(a.GetStatuses()), len(b.GetStatuses()))
	}
	for i, sa := range a.GetStatuses() {
		sb := b.GetStatuses()[i]
		ra, rb := sa.GetDurationUntilReset().AsDuration(), sb.GetDurationUntilReset().AsDuration()
		resetOK := ra == rb || straddled && (ra-rb).Abs() <= time.Second
		if (sa.GetDurationUntilReset() == nil) != (sb.GetDurationUntilReset() == nil) {
			resetOK = false
		}
		if sa.GetCode() != sb.GetCode() || !proto.Equal(sa.GetCurrentLimit(), sb.GetCurrentLimit()) || sa.GetLimitRemaining() != sb.GetLimitRemaining() || !resetOK {
			out = append(out, fmt.Sprintf("status %d:\n  envoyproxy/ratelimit %v\n  tollgate-rls         %v", i, sa, sb))
		}
	}
	return strings.Join(out, "\n")
}
