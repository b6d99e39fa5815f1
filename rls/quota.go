package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
)

// QuotaServer serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService) from a
// Server's configuration and store: each data plane decides locally from
// a token bucket the server assigns it, and reports its usage every few
// seconds, so the store sees one call per bucket and report, whatever the
// traffic.
//
// A bucket's BucketId is read as a descriptor of the stream's domain
// (docs/envoy.md says how its pairs are ordered). A bucket no
// descriptor matches, or of a domain not configured, is assigned
// ALLOW_ALL, as ShouldRateLimit answers OK to such a descriptor; an
// unlimited or shadow-mode one ALLOW_ALL too, and requests_per_unit 0
// DENY_ALL. Every other bucket shares its descriptor's limit (its first,
// when it has several) among the data planes reporting it: each is
// assigned a token bucket of its max-min fair share of the limit from the
// demands they report (tollgate.ShareStore), with a fill interval of the
// limit's period in whole seconds and a time to live of a few report
// intervals; while its reports refuse nothing, its bucket also holds its
// part of one fill of the limit, for demand that moves to it between
// reports (docs/envoy.md). Several QuotaServers on one store assign from the same
// demands.
type QuotaServer struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	srv     *Server
	shares  tollgate.ShareStore
	opts    quotaOptions
	replica string        // names this server's streams' members
	streams atomic.Uint64 // streams opened, the rest of a member's name
}

var _ rlqspb.RateLimitQuotaServiceServer = (*QuotaServer)(nil)

// NewQuotaServer returns the quota service of s: its configuration (and
// SetConfig's changes), store, store policy, fail mode and telemetry.
// s's store must be a tollgate.ShareStore.
func NewQuotaServer(s *Server, opts QuotaOptions) (*QuotaServer, error) {
	return newQuotaServer(s, opts)
}

// newQuotaServer is NewQuotaServer; tests give hooks that change what
// QuotaOptions does not say.
func newQuotaServer(s *Server, opts QuotaOptions, hooks ...func(*quotaOptions)) (*QuotaServer, error) {
	if s == nil {
		return nil, errors.New("rls: the server is nil")
	}
	shares, ok := s.store.(tollgate.ShareStore)
	if !ok {
		return nil, fmt.Errorf("rls: the store (%T) cannot share a limit: it is not a tollgate.ShareStore", s.store)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		h(&o)
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &QuotaServer{srv: s, shares: shares, opts: o, replica: hex.EncodeToString(id[:])}, nil
}

// StreamRateLimitQuotas serves one data plane's stream: it answers each
// report with the assignment of every bucket reported (an identical one
// only extends its time to live), pushes assignments again every
// rebalance interval, and abandons the buckets the stream stopped
// reporting. The first report must name the domain, and later ones the
// same or none. A malformed report ends the stream with
// codes.InvalidArgument before anything of it is stored.
func (q *QuotaServer) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	ctx := stream.Context()
	st := &quotaStream{q: q, member: q.replica + "-" + strconv.FormatUint(q.streams.Add(1), 36), buckets: map[string]*streamBucket{}}
	reports := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	// The receiver ends when the stream does: gRPC cancels ctx when this
	// handler returns, and Recv then fails.
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	var ticks <-chan time.Time
	if q.opts.rebalance > 0 {
		var stop func()
		ticks, stop = q.opts.newTicker(q.opts.rebalance)
		defer stop()
	}
	for {
		var resp *rlqspb.RateLimitQuotaResponse
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case r := <-reports:
			var err error
			if resp, err = st.report(ctx, r); err != nil {
				return err
			}
		case <-ticks:
			resp = st.rebalance(ctx)
		}
		if resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// quotaStream is one stream's state: its domain, the member it is in the
// shares, and its buckets.
type quotaStream struct {
	q       *QuotaServer
	domain  string
	member  string
	buckets map[string]*streamBucket
}

// streamBucket is one bucket a stream reports.
type streamBucket struct {
	id *rlqspb.BucketId
	// last is when it was last reported, on the quota clock.
	last time.Time
	// interval is its report interval, from its reports' time_elapsed
	// (0 until one says it).
	interval time.Duration
	// requests were admitted or refused over elapsed, by its last report
	// that said how long it covered (elapsed 0: none yet).
	requests uint64
	elapsed  time.Duration
	// pending requests over pendingFor are reports not yet read as a
	// demand: shorter than minDemandWindow so far.
	pending    uint64
	pendingFor time.Duration
	// saturated says its last report read as a demand refused requests:
	// it used its whole share.
	saturated, pendingDenied bool
	// sent is the tokens per fill of the token bucket last assigned, 0
	// when the last assignment was another; capacity is that bucket's
	// max_tokens.
	sent, capacity int64
	// match is the bucket's reading under config (nil: not read yet).
	config *Config
	match  bucketMatch
	found  bool
}

// checkReport refuses a report no configuration could make sense of,
// before anything of it is stored.
func (st *quotaStream) checkReport(r *rlqspb.RateLimitQuotaUsageReports) error {
	domain := r.GetDomain()
	switch {
	case st.domain == "" && domain == "":
		return status.Error(codes.InvalidArgument, "the first report on a stream must name its domain")
	case st.domain != "" && domain != "" && domain != st.domain:
		return status.Errorf(codes.InvalidArgument, "report for domain %q on a stream of domain %q: open another stream", domain, st.domain)
	case len(domain) > tollgate.MaxKeyLen:
		return status.Errorf(codes.InvalidArgument, "domain is %d bytes, more than %d", len(domain), tollgate.MaxKeyLen)
	case len(r.GetBucketQuotaUsages()) > maxQuotaBuckets:
		return status.Errorf(codes.InvalidArgument, "%d buckets in one report, more than %d", len(r.GetBucketQuotaUsages()), maxQuotaBuckets)
	}
	if domain == "" {
		domain = st.domain
	}
	added := 0
	for i, u := range r.GetBucketQuotaUsages() {
		pairs := u.GetBucketId().GetBucket()
		if len(pairs) == 0 {
			return status.Errorf(codes.InvalidArgument, "bucket %d: empty BucketId", i)
		}
		if len(pairs) > maxEntries {
			return status.Errorf(codes.InvalidArgument, "bucket %d: %d pairs, more than %d", i, len(pairs), maxEntries)
		}
		n := len(domain) + len(keySeparator)
		for k, v := range pairs {
			if k == "" {
				return status.Errorf(codes.InvalidArgument, "bucket %d: a BucketId key is empty", i)
			}
			n += escapedLen(k) + escapedLen(v) + 2
		}
		if n+maxPartLen > tollgate.MaxKeyLen {
			return status.Errorf(codes.InvalidArgument, "bucket %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen-maxPartLen)
		}
		if a, d := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(); a > tollgate.MaxRate || d > tollgate.MaxRate {
			return status.Errorf(codes.InvalidArgument, "bucket %d: %d requests allowed and %d denied: more than %d is not a count", i, a, d, int64(tollgate.MaxRate))
		}
		if e := u.GetTimeElapsed(); e != nil {
			if err := e.CheckValid(); err != nil || e.AsDuration() < 0 || e.AsDuration() > maxTimeElapsed {
				return status.Errorf(codes.InvalidArgument, "bucket %d: time_elapsed %s: want 0 to %s", i, e.AsDuration(), maxTimeElapsed)
			}
		}
		if st.buckets[bucketKey(pairs)] == nil {
			added++
		}
	}
	if len(st.buckets)+added > maxQuotaBuckets {
		return status.Errorf(codes.InvalidArgument, "%d buckets on one stream, more than %d", len(st.buckets)+added, maxQuotaBuckets)
	}
	return nil
}

// bucketKey names a BucketId whatever the order of its pairs.
func bucketKey(pairs map[string]string) string {
	entries := make([]Entry, 0, len(pairs))
	for k, v := range pairs {
		entries = append(entries, Entry{k, v})
	}
	sortEntries(entries)
	return StoreKey("", entries...)
}

// report records a report and answers it with every reported bucket's
// assignment and the abandonment of the buckets no longer reported.
func (st *quotaStream) report(ctx context.Context, r *rlqspb.RateLimitQuotaUsageReports) (*rlqspb.RateLimitQuotaResponse, error) {
	if err := st.checkReport(r); err != nil {
		return nil, err
	}
	if st.domain == "" {
		st.domain = r.GetDomain()
	}
	now := st.q.opts.clock()
	resp := &rlqspb.RateLimitQuotaResponse{}
	for _, u := range r.GetBucketQuotaUsages() {
		k := bucketKey(u.GetBucketId().GetBucket())
		b := st.buckets[k]
		if b == nil {
			b = &streamBucket{id: u.GetBucketId()}
			st.buckets[k] = b
		}
		b.last = now
		b.observe(u)
		if a := st.record(ctx, st.assign(ctx, b)); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	for _, a := range st.abandon(now) {
		resp.BucketAction = append(resp.BucketAction, st.record(ctx, a))
	}
	return resp, nil
}

// rebalance assigns every bucket of the stream again from the demands
// last reported; nil when the stream has none.
func (st *quotaStream) rebalance(ctx context.Context) *rlqspb.RateLimitQuotaResponse {
	var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
	for _, a := range st.abandon(st.q.opts.clock()) {
		actions = append(actions, st.record(ctx, a))
	}
	for _, b := range st.buckets {
		if a := st.record(ctx, st.assign(ctx, b)); a != nil {
			actions = append(actions, a)
		}
	}
	if len(actions) == 0 {
		return nil
	}
	return &rlqspb.RateLimitQuotaResponse{BucketAction: actions}
}

// abandon forgets the buckets not reported for their time to live, and
// returns their AbandonActions: the data plane drops them and stops
// reporting them until a request needs them again.
func (st *quotaStream) abandon(now time.Time) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
	for k, b := range st.buckets {
		if now.Sub(b.last) < st.ttl(b) {
			continue
		}
		delete(st.buckets, k)
		actions = append(actions, &rlqspb.RateLimitQuotaResponse_BucketAction{
			BucketId:     b.id,
			BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
		})
	}
	return actions
}

// ttl is b's assignments' time to live: a few of its report intervals, in
// whole seconds.
func (st *quotaStream) ttl(b *streamBucket) time.Duration {
	interval := b.interval
	if interval <= 0 {
		interval = st.q.opts.reportInterval
	}
	return max(time.Second, (time.Duration(st.q.opts.reports)*interval + time.Second - 1).Truncate(time.Second))
}

// record counts action (nil: none sent) in telemetry.MetricRLSQuotaActions and returns
// it.
func (st *quotaStream) record(ctx context.Context, action *rlqspb.RateLimitQuotaResponse_BucketAction) *rlqspb.RateLimitQuotaResponse_BucketAction {
	domain := ""
	if st.q.srv.config.Load().domains[st.domain] != nil {
		domain = st.domain
	}
	name := "none"
	switch {
	case action == nil:
	case action.GetAbandonAction() != nil:
		name = "abandon"
	case action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil:
		name = "token_bucket"
	case action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		name = "deny_all"
	default:
		name = "allow_all"
	}
	st.q.srv.tel.recordAction(ctx, domain, name)
	return action
}
