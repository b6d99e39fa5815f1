package rlqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/store"
)

// ErrNoAssignment is wrapped by the error of a decision on a bucket the
// Client holds no valid assignment for: none arrived yet, it expired, or
// the stream is down. The rule's FailMode applies.
var ErrNoAssignment = errors.New("rlqs: no valid quota assignment")

// Defaults of Options.
const (
	// defaultReportInterval is how often the Client reports usage.
	defaultReportInterval = time.Second
	// defaultIdleReports is how many reports in a row a bucket goes
	// without a decision before the Client forgets it.
	defaultIdleReports = 30
	// defaultMaxBuckets is the most buckets a Client reports: tollgate-rls
	// ends a stream reporting more than 1,024.
	defaultMaxBuckets = 1024
	// defaultFirstAssignmentWait bounds how long a decision waits for its
	// bucket's first assignment.
	defaultFirstAssignmentWait = 50 * time.Millisecond
)

// Options configures a Client. The zero value is every default: usage
// reported every second, a decision on a new bucket waiting up to 50ms for
// its first assignment, at most 1,024 buckets, each forgotten after 30
// reports without a decision, RuleBucketID, and time.Now.
type Options struct {
	// ReportInterval is how often usage is reported; 0 means 1s. At least
	// 10ms.
	ReportInterval time.Duration
	// FirstAssignmentWait bounds how long a decision on a new bucket waits
	// for its first assignment before the rule's FailMode applies; 0 means
	// 50ms, and a negative FirstAssignmentWait does not wait.
	FirstAssignmentWait time.Duration
	// MaxBuckets bounds the buckets the Client holds and reports; 0 means
	// 1024. A decision on a new key beyond them is ErrNoAssignment, and the
	// rule's FailMode applies.
	MaxBuckets int
	// IdleReports is how many reports a bucket goes without a decision
	// before it is forgotten and no longer reported; 0 means 30.
	IdleReports int
	// BucketID is how a store key becomes a BucketId (nil: RuleBucketID).
	BucketID BucketIDFunc
	// Clock is the clock assignments expire by and the local buckets
	// refill by (nil: time.Now).
	Clock func() time.Time
}

type options struct {
	interval  time.Duration
	firstWait time.Duration
	idle      int
	maxBucket int
	bucketID  BucketIDFunc
	clock     func() time.Time
}

// resolve checks o and gives every zero field its default.
func (o Options) resolve() (options, error) {
	switch {
	case o.ReportInterval != 0 && o.ReportInterval < 10*time.Millisecond:
		return options{}, fmt.Errorf("rlqs: report interval %s: want at least 10ms (0: the default, 1s)", o.ReportInterval)
	case o.IdleReports < 0:
		return options{}, fmt.Errorf("rlqs: idle reports %d: want at least 1 (0: the default, 30)", o.IdleReports)
	case o.MaxBuckets < 0:
		return options{}, fmt.Errorf("rlqs: max buckets %d: want at least 1 (0: the default, 1024)", o.MaxBuckets)
	}
	r := options{
		interval:  cmp.Or(o.ReportInterval, defaultReportInterval),
		firstWait: max(0, cmp.Or(o.FirstAssignmentWait, defaultFirstAssignmentWait)),
		idle:      cmp.Or(o.IdleReports, defaultIdleReports),
		maxBucket: cmp.Or(o.MaxBuckets, defaultMaxBuckets),
		bucketID:  o.BucketID,
		clock:     o.Clock,
	}
	if r.bucketID == nil {
		r.bucketID = RuleBucketID
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	return r, nil
}

// Client is a tollgate.Store deciding from RLQS assignments (see the
// package doc). It is safe for concurrent use; Close stops its stream.
type Client struct {
	rlqs   rlqspb.RateLimitQuotaServiceClient
	domain string
	opts   options
	// local decides the token-bucket assignments, under the keys of the
	// requests, with the assignment's limit.
	local *store.Memory

	mu      sync.RWMutex
	buckets map[string]*bucket // by store key
	keys    map[string]string  // store key by idOf(BucketId)

	wake   chan struct{} // a new bucket: report now
	cancel context.CancelFunc
	done   chan struct{}
}

var _ tollgate.Settler = (*Client)(nil)

// New returns a Client reporting usage for domain on conn and starts its
// stream. Close it to stop the stream.
func New(conn grpc.ClientConnInterface, domain string, opts Options) (*Client, error) {
	switch {
	case check.Nil(conn):
		return nil, errors.New("rlqs: the connection is nil")
	case domain == "":
		return nil, errors.New("rlqs: the domain is empty")
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	local, err := store.NewMemory(store.WithClock(o.clock))
	if err != nil {
		return nil, fmt.Errorf("rlqs: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		rlqs:    rlqspb.NewRateLimitQuotaServiceClient(conn),
		domain:  domain,
		opts:    o,
		local:   local,
		buckets: map[string]*bucket{},
		keys:    map[string]string{},
		wake:    make(chan struct{}, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go c.run(ctx)
	return c, nil
}

// Close stops the stream and waits for its goroutines, or for ctx.
func (c *Client) Close(ctx context.Context) error {
	c.cancel()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bucketOf returns key's bucket, creating it (and asking for a report
// now) the first time; nil when the Client holds its most buckets.
func (c *Client) bucketOf(key string) *bucket {
	c.mu.RLock()
	b := c.buckets[key]
	c.mu.RUnlock()
	if b != nil {
		return b
	}
	c.mu.Lock()
	if b = c.buckets[key]; b == nil {
		if len(c.buckets) >= c.opts.maxBucket {
			c.mu.Unlock()
			return nil
		}
		id := c.opts.bucketID(key)
		b = newBucket(id)
		c.buckets[key] = b
		c.keys[idOf(id)] = key
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return b
}

// plan returns the assignment in force for req's bucket. A bucket's first
// assignment is waited for, within ctx and the first-assignment wait;
// afterwards, no valid assignment is ErrNoAssignment at once.
func (c *Client) plan(ctx context.Context, req tollgate.Request) (*bucket, *assignment, error) {
	b := c.bucketOf(req.Key)
	if b == nil {
		return nil, nil, fmt.Errorf("%w for %q: the client holds its most buckets, %d", ErrNoAssignment, req.Key, c.opts.maxBucket)
	}
	a := b.assign.Load()
	if a == nil {
		t := time.NewTimer(c.opts.firstWait)
		select {
		case <-b.first:
			a = b.assign.Load()
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if a == nil || !c.opts.clock().Before(a.expires) {
		b.denied.Add(1) // demand the server should hear of
		return b, nil, fmt.Errorf("%w for %q", ErrNoAssignment, req.Key)
	}
	return b, a, nil
}

// DecidesInProcess reports that the Client decides in process, waiting on
// nothing but a bucket's first assignment (at most its first-assignment
// wait): package interceptor gives its calls no deadline of their own.
func (c *Client) DecidesInProcess() bool { return true }

// Allow decides req from its bucket's assignment: ALLOW_ALL admits,
// DENY_ALL refuses with a RetryAfter of the report interval (the next
// answer may lift it), a token bucket decides as store.Memory decides a
// TokenBucket of its tokens.
func (c *Client) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if err := check.NormalizeInPlace(&req); err != nil {
		return tollgate.Decision{}, err
	}
	b, a, err := c.plan(ctx, req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	d, local := c.judge(a, req)
	if local {
		req.Limit = a.limit
		if d, err = c.local.Allow(ctx, req); err != nil {
			return tollgate.Decision{}, err
		}
	}
	if d.Allowed {
		b.allowed.Add(1)
	} else {
		b.denied.Add(1)
	}
	return d, nil
}

// judge decides req (normalized) from a when no local bucket is needed:
// ALLOW_ALL, DENY_ALL (RetryAfter the report interval, at most until the
// assignment expires) or a cost the token bucket can never hold
// (RetryAfter its fill interval). local reports that the token bucket
// decides instead.
func (c *Client) judge(a *assignment, req tollgate.Request) (d tollgate.Decision, local bool) {
	switch {
	case a.kind == allowAll:
		return tollgate.Decision{Allowed: true, Remaining: req.Limit.Capacity()}, false
	case a.kind == denyAll:
		return tollgate.Decision{RetryAfter: max(time.Millisecond, min(a.expires.Sub(c.opts.clock()), c.opts.interval))}, false
	case req.Cost > a.limit.Capacity():
		return tollgate.Decision{RetryAfter: a.limit.Period}, false
	}
	return tollgate.Decision{}, true
}

// AllowAll decides reqs all or nothing, each from its bucket's
// assignment.
func (c *Client) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	local, bs, as, err := c.localRequests(ctx, reqs)
	if err != nil {
		return nil, err
	}
	ds := make([]tollgate.Decision, len(reqs))
	var idx []int
	var lreqs []tollgate.Request
	refused := tollgate.Decision{}
	for i, a := range as {
		d, onLocal := c.judge(a, local[i])
		switch {
		case onLocal:
			idx, lreqs = append(idx, i), append(lreqs, local[i])
		case !d.Allowed:
			refused.RetryAfter = max(refused.RetryAfter, d.RetryAfter)
		}
		ds[i] = d
	}
	if refused.RetryAfter == 0 && len(lreqs) > 0 {
		lds, err := c.local.AllowAll(ctx, lreqs)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			ds[i] = lds[j]
		}
	}
	admitted := true
	for i := range ds {
		if refused.RetryAfter > 0 {
			ds[i] = refused // one refusal refuses the set, nothing debited
		}
		admitted = admitted && ds[i].Allowed
	}
	for _, b := range bs {
		if admitted {
			b.allowed.Add(1)
		} else {
			b.denied.Add(1)
		}
	}
	return ds, nil
}

// localRequests returns reqs with their assignments' limits, their
// buckets and their assignments, or ErrNoAssignment.
func (c *Client) localRequests(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Request, []*bucket, []*assignment, error) {
	if len(reqs) == 0 || len(reqs) > tollgate.MaxAllowAll {
		return nil, nil, nil, fmt.Errorf("%w: %d requests, want 1 to %d", tollgate.ErrInvalidRequest, len(reqs), tollgate.MaxAllowAll)
	}
	local := make([]tollgate.Request, len(reqs))
	bs := make([]*bucket, len(reqs))
	as := make([]*assignment, len(reqs))
	for i, r := range reqs {
		r, err := check.Normalize(r)
		if err != nil {
			return nil, nil, nil, err
		}
		b, a, err := c.plan(ctx, r)
		if err != nil {
			return nil, nil, nil, err
		}
		if a.kind == tokens {
			r.Limit = a.limit
		}
		local[i], bs[i], as[i] = r, b, a
	}
	return local, bs, as, nil
}

// Peek reports what Allow would answer for req now, without a debit.
func (c *Client) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	local, _, as, err := c.localRequests(ctx, []tollgate.Request{req})
	if err != nil {
		return tollgate.Decision{}, err
	}
	if d, isLocal := c.judge(as[0], local[0]); !isLocal {
		return d, nil
	}
	return c.local.Peek(ctx, local[0])
}

// Reset refills req's local bucket.
func (c *Client) Reset(ctx context.Context, req tollgate.Request) error {
	req.Limit.Algorithm = tollgate.TokenBucket
	return c.local.Reset(ctx, req)
}

// Settle settles req on its local bucket (see tollgate.Settler.Settle); the
// server hears of the final cost only as the decisions counted.
func (c *Client) Settle(ctx context.Context, req tollgate.Request, admitted tollgate.Admission, cost int64) (tollgate.Decision, error) {
	ds, err := c.SettleAll(ctx, []tollgate.Request{req}, []tollgate.Admission{admitted}, []int64{cost})
	if err != nil {
		return tollgate.Decision{}, err
	}
	return ds[0], nil
}

// SettleAll settles a set on the local buckets of their token-bucket
// assignments; the others have nothing to settle. A malformed set is an
// error wrapping tollgate.ErrInvalidRequest, as on every store.
func (c *Client) SettleAll(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Decision, error) {
	if _, err := check.SettleSet(reqs, admitted, costs); err != nil {
		return nil, err
	}
	local, _, as, err := c.localRequests(ctx, reqs)
	if err != nil {
		return nil, err
	}
	ds := make([]tollgate.Decision, len(reqs))
	for i, a := range as {
		if a.kind != tokens {
			ds[i] = tollgate.Decision{Allowed: a.kind == allowAll}
			continue
		}
		local[i].Cost = min(local[i].Cost, a.limit.Capacity())
		if ds[i], err = c.local.Settle(ctx, local[i], admitted[i], costs[i]); err != nil {
			return nil, err
		}
	}
	return ds, nil
}
