package rls_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// quotaConfig is the configuration the quota tests serve: a 400/s limit
// on the bucket {api: <any>}, nested and wildcard descriptors, an
// unlimited and a blocked one.
const quotaConfig = `domain: edge
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 400}
  - key: tenant
    descriptors:
      - key: method
        value: "Get*"
        rate_limit: {unit: minute, requests_per_unit: 60}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 7}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
`

// quotaBackend gives the quota tests n stores on one shared backend, as n
// tollgate-rls replicas on one Redis would have; the Memory one is a
// single store read by n servers, on a clock the test moves.
type quotaBackend struct {
	name   string
	stores func(t *testing.T, n int, clock *fakeclock.Clock) []tollgate.Store
	// keys counts the keys the backend holds under the test's prefix
	// (Memory: -1, not counted).
	keys func(t *testing.T) int
}

func quotaBackends(t *testing.T) []quotaBackend {
	prefix := redistest.KeyPrefix(t)
	return []quotaBackend{
		{name: "memory", stores: func(t *testing.T, n int, clock *fakeclock.Clock) []tollgate.Store {
			m := newMemory(t, store.WithClock(clock.Now))
			out := make([]tollgate.Store, n)
			for i := range out {
				out[i] = m
			}
			return out
		}, keys: func(*testing.T) int { return -1 }},
		{name: "redis", stores: func(t *testing.T, n int, _ *fakeclock.Clock) []tollgate.Store {
			srv := redistest.Single(t)
			out := make([]tollgate.Store, n)
			for i := range out {
				out[i] = newRedis(t, srv.Client(t), store.WithPrefix(prefix))
			}
			return out
		}, keys: func(t *testing.T) int {
			ks, err := redistest.Single(t).Client(t).Keys(context.Background(), prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			return len(ks)
		}},
		{name: "cluster", stores: func(t *testing.T, n int, _ *fakeclock.Clock) []tollgate.Store {
			cl := redistest.SharedCluster(t)
			out := make([]tollgate.Store, n)
			for i := range out {
				out[i] = newRedis(t, cl.Client(t), store.WithPrefix(prefix))
			}
			return out
		}, keys: func(t *testing.T) int {
			var mu sync.Mutex
			n := 0
			err := redistest.SharedCluster(t).Client(t).ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
				ks, err := c.Keys(ctx, prefix+"*").Result()
				mu.Lock()
				n += len(ks)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}},
	}
}

// quotaReplicas serves the quota service of one tollgate-rls replica per
// store, each on its own bufconn listener, and returns their clients.
func quotaReplicas(t *testing.T, stores []tollgate.Store, opts rls.QuotaOptions, hooks ...rls.QuotaHook) []rlqspb.RateLimitQuotaServiceClient {
	t.Helper()
	cfg, err := rls.ParseConfig(rls.File{Name: "edge.yaml", Data: []byte(quotaConfig)})
	if err != nil {
		t.Fatal(err)
	}
	var clients []rlqspb.RateLimitQuotaServiceClient
	for _, st := range stores {
		srv, err := rls.NewServer(st, rls.Options{Config: cfg, StoreTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		q, err := rls.NewQuotaServerHooked(srv, opts, hooks...)
		if err != nil {
			t.Fatal(err)
		}
		cc := grpctest.Serve(t, func(s *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(s, q) }, nil)
		clients = append(clients, rlqspb.NewRateLimitQuotaServiceClient(cc))
	}
	return clients
}

// plane is a simulated data plane: it offers demand requests per second
// to one bucket and decides them from its assignment as Envoy's
// rate_limit_quota filter does (a token bucket refilled continuously,
// which a new assignment replaces with a full one; an identical one only
// extends its time to live; no assignment yet or an expired one allows
// all, Envoy's default), and reports what it allowed and denied.
type plane struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	cancel context.CancelFunc
	bucket *rlqspb.BucketId
	domain string
	demand float64 // requests per second offered

	strategy *typev3.RateLimitStrategy
	expires  time.Time
	tokens   float64
	capacity float64
	rate     float64 // tokens per second

	offered         float64 // fractional requests carried over
	allowed, denied uint64  // since the last report
	total           float64 // allowed since the start
	reported        bool
	lastReport      time.Time
	assignments     int // assignments that replaced the bucket
}

func newPlane(t *testing.T, c rlqspb.RateLimitQuotaServiceClient, domain string, bucket map[string]string, demand float64) *plane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &plane{t: t, stream: stream, cancel: cancel, bucket: &rlqspb.BucketId{Bucket: bucket}, domain: domain, demand: demand}
	t.Cleanup(p.leave)
	return p
}

// leave closes the plane's stream.
func (p *plane) leave() { p.cancel() }

// run offers the plane's demand over dt, deciding each request.
func (p *plane) run(now time.Time, dt time.Duration) {
	p.offered += p.demand * dt.Seconds()
	n := math.Floor(p.offered)
	p.offered -= n
	admit := n
	if p.strategy != nil && now.Before(p.expires) {
		switch s := p.strategy.GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_:
			if s.BlanketRule == typev3.RateLimitStrategy_DENY_ALL {
				admit = 0
			}
		case *typev3.RateLimitStrategy_TokenBucket:
			p.tokens = min(p.capacity, p.tokens+p.rate*dt.Seconds())
			admit = min(n, math.Floor(p.tokens))
			p.tokens -= admit
		}
	}
	p.allowed += uint64(admit)
	p.denied += uint64(n - admit)
	p.total += admit
}

// report sends the plane's usage (time_elapsed in whole seconds, 0 on the
// first report, as Envoy does) and applies the answer.
func (p *plane) report(now time.Time) {
	p.t.Helper()
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: p.bucket, NumRequestsAllowed: p.allowed, NumRequestsDenied: p.denied, TimeElapsed: durationpb.New(0)}
	r := &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
	if !p.reported {
		r.Domain = p.domain
	} else {
		u.TimeElapsed = durationpb.New(now.Sub(p.lastReport).Round(time.Second))
	}
	p.reported, p.lastReport, p.allowed, p.denied = true, now, 0, 0
	if err := p.stream.Send(r); err != nil {
		p.t.Fatalf("report: %v", err)
	}
	p.receive(now)
}

// receive applies one response of the server.
func (p *plane) receive(now time.Time) {
	p.t.Helper()
	resp, err := p.stream.Recv()
	if err != nil {
		p.t.Fatalf("receive: %v", err)
	}
	for _, a := range resp.GetBucketAction() {
		if !proto.Equal(a.GetBucketId(), p.bucket) {
			p.t.Fatalf("an action for bucket %v on the stream of %v", a.GetBucketId(), p.bucket)
		}
		if a.GetAbandonAction() != nil {
			p.strategy = nil
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		ttl := qa.GetAssignmentTimeToLive().AsDuration()
		if ttl < time.Second || ttl%time.Second != 0 {
			p.t.Fatalf("assignment time to live %s: want whole seconds", ttl)
		}
		p.expires = now.Add(ttl)
		s := qa.GetRateLimitStrategy()
		if s.GetRequestsPerTimeUnit() != nil {
			p.t.Fatal("a requests_per_time_unit assignment, which Envoy skips")
		}
		if proto.Equal(s, p.strategy) {
			continue
		}
		p.strategy = s
		p.assignments++
		if tb := s.GetTokenBucket(); tb != nil {
			fill := tb.GetFillInterval().AsDuration()
			if fill < time.Second || fill%time.Second != 0 {
				p.t.Fatalf("fill interval %s: want whole seconds", fill)
			}
			p.capacity = float64(tb.GetMaxTokens())
			p.tokens = p.capacity
			p.rate = float64(tb.GetTokensPerFill().GetValue()) / fill.Seconds()
		}
	}
}

// share is the plane's assignment in tokens per second (-1 allow all, 0
// deny all or none).
func (p *plane) share() float64 {
	switch {
	case p.strategy == nil:
		return 0
	case p.strategy.GetTokenBucket() != nil:
		return p.rate
	case p.strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
		return -1
	}
	return 0
}

// sim moves planes through time on a clock the quota servers and the
// Memory store read.
type sim struct {
	clock  *fakeclock.Clock
	planes []*plane
}

// advance runs every plane for d in 10ms steps.
func (s *sim) advance(d time.Duration) {
	const step = 10 * time.Millisecond
	for range d / step {
		s.clock.Advance(step)
		now := s.clock.Now()
		for _, p := range s.planes {
			if p.demand > 0 {
				p.run(now, step)
			}
		}
	}
}

func (s *sim) total() float64 {
	t := 0.0
	for _, p := range s.planes {
		t += p.total
	}
	return t
}

func (s *sim) shares() string {
	out := ""
	for _, p := range s.planes {
		out += fmt.Sprintf(" %.0f", p.share())
	}
	return out
}
