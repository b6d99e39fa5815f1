package rls_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// backend is one store the behaviour tests run against.
type backend struct {
	name  string
	store func(t *testing.T) tollgate.Store
	// clocked: the store reads a real clock (Redis), so second windows
	// may roll over mid-test.
	clocked bool
}

// fixedNow is the Memory store's frozen clock: mid-second, mid-day.
var fixedNow = time.Date(2026, 3, 4, 12, 30, 15, 500_000_000, time.UTC)

func backends() []backend {
	return []backend{
		{name: "memory", store: func(t *testing.T) tollgate.Store {
			return newMemory(t, store.WithClock(func() time.Time { return fixedNow }))
		}},
		{name: "redis", clocked: true, store: func(t *testing.T) tollgate.Store {
			return newRedis(t, redistest.Single(t).Client(t))
		}},
		{name: "cluster", clocked: true, store: func(t *testing.T) tollgate.Store {
			return newRedis(t, redistest.SharedCluster(t).Client(t))
		}},
	}
}

// forEachBackend runs fn once per backend, in subtests.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// env is a Server on a bufconn listener and go-control-plane's client for it.
type env struct {
	srv    *rls.Server
	client pb.RateLimitServiceClient
	prefix string // prepended to every domain of the configuration
}

// newEnv serves st with the configuration yaml files (each file a string),
// their domains prefixed with a unique prefix (and, for a clocked store,
// their second, minute and hour units turned into days, so that a window
// never rolls over during a test).
func newEnv(t *testing.T, b backend, files []string, opts ...func(*rls.Options)) *env {
	t.Helper()
	e := &env{prefix: strings.ReplaceAll(redistest.KeyPrefix(t), ":", "_")}
	cfg, err := rls.ParseConfig(e.files(b, files)...)
	if err != nil {
		t.Fatal(err)
	}
	// A generous store deadline: these tests prove behaviour, and a
	// loaded machine (-race, a Cluster's first slot lookup) must not turn
	// into the fail policy.
	o := rls.Options{Config: cfg, StoreTimeout: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := rls.NewServer(b.store(t), o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	cc := grpctest.Serve(t, func(s *grpc.Server) { pb.RegisterRateLimitServiceServer(s, srv) }, nil)
	e.client = pb.NewRateLimitServiceClient(cc)
	return e
}

func (e *env) files(b backend, files []string) []rls.File {
	var out []rls.File
	for i, f := range files {
		f = strings.Replace(f, "domain: ", "domain: "+e.prefix, 1)
		if b.clocked {
			for _, u := range []string{"second", "minute", "hour"} {
				f = strings.ReplaceAll(f, "unit: "+u, "unit: day")
			}
		}
		out = append(out, rls.File{Name: "file" + string(rune('a'+i)) + ".yaml", Data: []byte(f)})
	}
	return out
}

// readFiles returns the contents of the files matching pattern.
func readFiles(t testing.TB, pattern string) []string {
	t.Helper()
	names, err := filepath.Glob(pattern)
	if err != nil || len(names) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	var out []string
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(data))
	}
	return out
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *rlv3.RateLimitDescriptor {
	desc := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return desc
}

// withHits sets a descriptor's own hits_addend.
func withHits(desc *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

// call asks for descs in domain (without the env's prefix) with hits.
func (e *env) call(domain string, hits uint32, descs ...*rlv3.RateLimitDescriptor) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: e.prefix + domain, Descriptors: descs, HitsAddend: hits})
}

// must is call that fails the test on an error.
func (e *env) must(t *testing.T, domain string, hits uint32, descs ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := e.call(domain, hits, descs...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

// codes returns the overall code and each status's code.
func codesOf(resp *pb.RateLimitResponse) (pb.RateLimitResponse_Code, []pb.RateLimitResponse_Code) {
	var cs []pb.RateLimitResponse_Code
	for _, s := range resp.GetStatuses() {
		cs = append(cs, s.GetCode())
	}
	return resp.GetOverallCode(), cs
}

// expect checks the overall code and each status's code.
func expect(t *testing.T, what string, resp *pb.RateLimitResponse, overall pb.RateLimitResponse_Code, each ...pb.RateLimitResponse_Code) {
	t.Helper()
	gotOverall, got := codesOf(resp)
	if gotOverall != overall || len(got) != len(each) {
		t.Fatalf("%s: overall %s, statuses %v; want %s, %v", what, gotOverall, got, overall, each)
	}
	for i := range each {
		if got[i] != each[i] {
			t.Fatalf("%s: overall %s, statuses %v; want %s, %v", what, gotOverall, got, overall, each)
		}
	}
}

// admitted counts how many of n identical calls are OK, failing on an
// error.
func (e *env) admitted(t *testing.T, n int, domain string, hits uint32, descs ...*rlv3.RateLimitDescriptor) int {
	t.Helper()
	count := 0
	for range n {
		if e.must(t, domain, hits, descs...).GetOverallCode() == ok {
			count++
		}
	}
	return count
}
