package rls_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/rls"
)

// FuzzParseConfig: any bytes either load or are refused with a
// *ConfigError; a configuration that loads answers requests for its domain
// without a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{limitsYAML, "domain: d\n", "", "domain: [", "domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 0}\n"} {
		f.Add([]byte(s), "k", "ab")
	}
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		cfg, err := rls.ParseConfig(rls.File{Name: "f.yaml", Data: data})
		if err != nil {
			var ce *rls.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rls.ErrConfig) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			return
		}
		srv, err := rls.NewServer(newMemory(t), rls.Options{Config: cfg, ResponseHeaders: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, domain := range cfg.Domains() {
			req := &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d(key, value), d(key, value, key, value)}}
			checkAnswer(t, req, srv)
		}
	})
}

// FuzzShouldRateLimit: any request against the README configurations is
// answered (a status per descriptor) or refused with InvalidArgument.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("sms", "kind\x00promo\x01recipient\x00+1\x02recipient\x00+1", uint32(0), uint64(1))
	f.Add("paths", "route\x00/v2/a/items/b/buy", uint32(3), uint64(0))
	f.Add("shared", "doc\x00docs/%=&~*", uint32(1), uint64(1))
	f.Add("overrides", "route\x00reads\x01account\x00acme\x02route\x00search\x01account\x00acme", uint32(0), uint64(2))
	f.Add("", "", uint32(0), uint64(0))
	var files []rls.File
	for _, data := range readFiles(f, "testdata/readme/*.yaml") {
		files = append(files, rls.File{Name: "f", Data: []byte(data)})
	}
	cfg, err := rls.ParseConfig(files...)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := rls.NewServer(newMemory(f), rls.Options{Config: cfg, ResponseHeaders: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, spec string, hits uint32, descHits uint64) {
		// spec: descriptors separated by \x02, entries by \x01, key and
		// value by \x00.
		req := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for i, ds := range strings.Split(spec, "\x02") {
			desc := &rlv3.RateLimitDescriptor{}
			for _, es := range strings.Split(ds, "\x01") {
				k, v, _ := strings.Cut(es, "\x00")
				desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
			}
			if i%2 == 1 {
				desc = withHits(desc, descHits)
			}
			req.Descriptors = append(req.Descriptors, desc)
		}
		checkAnswer(t, req, srv)
	})
}

func checkAnswer(t *testing.T, req *pb.RateLimitRequest, srv *rls.Server) {
	t.Helper()
	resp, err := srv.ShouldRateLimit(context.Background(), req)
	if err != nil {
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: want an answer or InvalidArgument", err)
		}
		return
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	anyOver := false
	for _, st := range resp.Statuses {
		anyOver = anyOver || st.Code == pb.RateLimitResponse_OVER_LIMIT
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT && !anyOver {
		t.Fatal("OVER_LIMIT overall without an over-limit descriptor")
	}
}
