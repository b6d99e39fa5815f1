package rlqs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
)

// TestInterceptorDecidesFromAssignment: two replicas whose Limiters
// decide from one RLQS server's assignments, on each store the server can
// run on: together they admit about the quota of 100/s (each its share),
// a denial is RESOURCE_EXHAUSTED with the RetryInfo of the local bucket,
// and the server's store sees one call per report, not per request.
func TestInterceptorDecidesFromAssignment(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			conn := quotaServer(t, st(), rls.QuotaOptions{RebalanceInterval: 100 * time.Millisecond})
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for range 2 {
				// The first call waits for its bucket's first assignment,
				// however busy the machine (a generous first-assignment
				// wait, where the default is 50ms).
				c := newClient(t, conn, rlqs.Options{ReportInterval: 100 * time.Millisecond, FirstAssignmentWait: 5 * time.Second})
				svc := replica(t, c, perTenant(interceptor.FailClosed))
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
				// Warm up: the first report subscribes. A replica joining
				// after another took the whole quota is refused until the
				// next rebalance.
				if _, err := svc.Say(ctx, wrapperspb.String("hi")); err != nil && status.Code(err) != codes.ResourceExhausted {
					t.Fatal(err)
				}
				wg.Go(func() {
					deadline := time.Now().Add(2 * time.Second)
					for time.Now().Before(deadline) {
						_, err := svc.Say(ctx, wrapperspb.String("hi"))
						switch status.Code(err) {
						case codes.OK:
							admitted.Add(1)
						case codes.ResourceExhausted:
							denied.Add(1)
							var ri *errdetails.RetryInfo
							for _, d := range status.Convert(err).Details() {
								if r, ok := d.(*errdetails.RetryInfo); ok {
									ri = r
								}
							}
							if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 {
								t.Errorf("denial without a RetryInfo: %v", err)
								return
							}
						default:
							t.Errorf("call: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			// 2s of 100/s, plus each replica's first full bucket and the
			// shares' convergence.
			t.Logf("admitted %d, denied %d in 2s at a 100/s quota", admitted.Load(), denied.Load())
			if a := admitted.Load(); a < 150 || a > 2*100+2*100+50 {
				t.Errorf("admitted %d in 2s, want about 200 (the quota) and at most the quota plus each replica's first bucket", a)
			}
			if denied.Load() == 0 {
				t.Error("nothing denied: the callers never reached the quota")
			}
		})
	}
}

// TestNoAssignmentIsTheFailMode: with the server gone, a bucket's
// assignment expires and the rule's fail mode decides: FailClosed answers
// UNAVAILABLE, FailOpen admits. The Client's error wraps ErrNoAssignment.
func TestNoAssignmentIsTheFailMode(t *testing.T) {
	conn := quotaServer(t, stores(t)["memory"](), rls.QuotaOptions{AssignmentReports: 1, ReportInterval: time.Second})
	now := time.Now()
	var offset atomic.Int64
	clock := func() time.Time { return now.Add(time.Duration(offset.Load())) }
	c := newClient(t, conn, rlqs.Options{Clock: clock})
	ctx := context.Background()
	req := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100)}
	if d, err := c.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("first call: %+v %v, want admitted once the first assignment arrived", d, err)
	}
	offset.Store(int64(time.Hour)) // far past the assignment's time to live
	if _, err := c.Allow(ctx, req); !errors.Is(err, rlqs.ErrNoAssignment) {
		t.Fatalf("after the assignment expired: %v, want ErrNoAssignment", err)
	}
	for _, tc := range []struct {
		mode interceptor.FailMode
		want codes.Code
	}{{interceptor.FailClosed, codes.Unavailable}, {interceptor.FailOpen, codes.OK}} {
		svc := replica(t, c, perTenant(tc.mode))
		_, err := svc.Say(metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme"), wrapperspb.String("hi"))
		if status.Code(err) != tc.want {
			t.Errorf("%s with the assignment expired: %v, want %s", tc.mode, err, tc.want)
		}
	}
}

// TestAllowAllAllOrNothing: a set with a bucket assigned DENY_ALL is
// refused whole, and its token-bucket requests are not debited.
func TestAllowAllAllOrNothing(t *testing.T) {
	c := newClient(t, quotaServer(t, stores(t)["memory"](), rls.QuotaOptions{}), rlqs.Options{})
	ctx := context.Background()
	acme := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100), Cost: 10}
	blocked := tollgate.Request{Key: "blocked\x00ck:acme", Limit: tollgate.PerSecond(100)}
	ds, err := c.AllowAll(ctx, []tollgate.Request{acme, blocked})
	if err != nil || ds[0].Allowed || ds[1].Allowed || ds[0].RetryAfter <= 0 {
		t.Fatalf("a set with a DENY_ALL bucket: %+v %v, want both refused with a wait", ds, err)
	}
	d, err := c.Peek(ctx, acme)
	if err != nil || !d.Allowed || d.Remaining != 90 {
		t.Fatalf("after the refused set: %+v %v, want the bucket untouched (a cost of 10 would leave 90)", d, err)
	}
	ds, err = c.AllowAll(ctx, []tollgate.Request{acme, {Key: "per-tenant\x00ck:other", Limit: tollgate.PerSecond(100)}})
	if err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[0].Remaining != 90 {
		t.Fatalf("a set of two token buckets: %+v %v, want both admitted, 90 left of the first", ds, err)
	}
}

// TestMaxBuckets: a key beyond the Client's most buckets is
// ErrNoAssignment at once, and the keys it holds keep deciding.
func TestMaxBuckets(t *testing.T) {
	c := newClient(t, quotaServer(t, stores(t)["memory"](), rls.QuotaOptions{}), rlqs.Options{MaxBuckets: 2})
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := c.Allow(ctx, tollgate.Request{Key: "per-tenant\x00ck:" + k, Limit: tollgate.PerSecond(100)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Allow(ctx, tollgate.Request{Key: "per-tenant\x00ck:c", Limit: tollgate.PerSecond(100)}); !errors.Is(err, rlqs.ErrNoAssignment) {
		t.Fatalf("a third key with two buckets at most: %v, want ErrNoAssignment", err)
	}
	if d, err := c.Allow(ctx, tollgate.Request{Key: "per-tenant\x00ck:a", Limit: tollgate.PerSecond(100)}); err != nil || !d.Allowed {
		t.Fatalf("a key held: %+v %v", d, err)
	}
}

// TestClientBadOptions: New refuses what it cannot run with, and takes the
// zero value and a negative FirstAssignmentWait (no wait).
func TestClientBadOptions(t *testing.T) {
	conn := quotaServer(t, stores(t)["memory"](), rls.QuotaOptions{})
	for name, opts := range map[string]rlqs.Options{
		"report interval below 10ms": {ReportInterval: 9 * time.Millisecond},
		"negative report interval":   {ReportInterval: -time.Second},
		"negative idle reports":      {IdleReports: -1},
		"negative max buckets":       {MaxBuckets: -1},
	} {
		if _, err := rlqs.New(conn, "services", opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := rlqs.New(conn, "", rlqs.Options{}); err == nil {
		t.Error("an empty domain: no error")
	}
	if _, err := rlqs.New((*grpc.ClientConn)(nil), "services", rlqs.Options{}); err == nil {
		t.Error("a typed nil connection: no error")
	}
	for name, opts := range map[string]rlqs.Options{
		"zero value":  {},
		"no wait":     {FirstAssignmentWait: -1},
		"every field": {ReportInterval: 10 * time.Millisecond, FirstAssignmentWait: time.Second, MaxBuckets: 1, IdleReports: 1, BucketID: rlqs.RuleBucketID, Clock: time.Now},
	} {
		t.Run(name, func(t *testing.T) { newClient(t, conn, opts) }) // fails on an error
	}
}

// TestNoFirstAssignmentWait: with a negative FirstAssignmentWait a decision
// on a new bucket does not wait for an assignment that never comes: it is
// ErrNoAssignment at once, under a context without a deadline.
func TestNoFirstAssignmentWait(t *testing.T) {
	silent := grpctest.Serve(t, func(s *grpc.Server) {
		rlqspb.RegisterRateLimitQuotaServiceServer(s, rlqspb.UnimplementedRateLimitQuotaServiceServer{})
	}, nil)
	c := newClient(t, silent, rlqs.Options{FirstAssignmentWait: -1})
	_, err := c.Allow(context.Background(), tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100)})
	if !errors.Is(err, rlqs.ErrNoAssignment) {
		t.Fatalf("a new bucket, no wait: %v, want ErrNoAssignment", err)
	}
}

// A malformed settlement is refused with an error wrapping
// tollgate.ErrInvalidRequest, as every store refuses it; a set whose
// lengths disagree panicked.
func TestSettleValidation(t *testing.T) {
	c := newClient(t, quotaServer(t, newMemory(t), rls.QuotaOptions{}), rlqs.Options{FirstAssignmentWait: 5 * time.Second})
	ctx := context.Background()
	req := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100)}
	d, err := c.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("admission: %+v, %v", d, err)
	}
	adm := d.Admission()
	for name, call := range map[string]func() error{
		"lengths": func() error {
			_, err := c.SettleAll(ctx, []tollgate.Request{req, req}, []tollgate.Admission{adm}, []int64{1, 1})
			return err
		},
		"empty":         func() error { _, err := c.SettleAll(ctx, nil, nil, nil); return err },
		"negative cost": func() error { _, err := c.Settle(ctx, req, adm, -1); return err },
		"overdrawn": func() error {
			bad := req
			bad.Overdraw = true
			_, err := c.Settle(ctx, bad, adm, 1)
			return err
		},
	} {
		if err := call(); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidRequest", name, err)
		}
	}
}
