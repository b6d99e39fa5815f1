package rlqs

import (
	"context"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Reconnection backoff of the stream.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// run keeps one stream open until ctx ends, reconnecting with backoff.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		if c.stream(ctx) {
			backoff = minBackoff
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// stream serves one stream until it fails or ctx ends: a report every
// interval (and at once when a new bucket needs an assignment), the
// server's actions applied as they come. It reports whether the stream
// carried at least one response.
func (c *Client) stream(ctx context.Context) (answered bool) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.rlqs.StreamRateLimitQuotas(sctx)
	if err != nil {
		return false
	}
	recvDone := make(chan bool, 1)
	go func() {
		got := false
		for {
			resp, err := s.Recv()
			if err != nil {
				recvDone <- got
				return
			}
			got = true
			c.apply(resp)
		}
	}()
	// The receiver has returned whenever this does.
	defer func() {
		cancel()
		answered = <-recvDone || answered
	}()
	ticker := time.NewTicker(c.opts.interval)
	defer ticker.Stop()
	first, all := true, true
	for {
		if r := c.report(first, all); r != nil {
			if err := s.Send(r); err != nil {
				return false
			}
			first = false
		}
		select {
		case <-ctx.Done():
			return false
		case got := <-recvDone:
			recvDone <- got // for the deferred wait
			return got
		case <-ticker.C:
			all = true
		case <-c.wake:
			all = first // a new bucket: subscribe it now, report the rest at the tick
		}
	}
}

// report builds the usage report of every bucket, or with all false of
// the buckets never reported (nil when there is none), and forgets the
// buckets idle too long. The first report of a stream names the domain
// and reports every bucket, which subscribes them.
func (c *Client) report(first, all bool) *rlqspb.RateLimitQuotaUsageReports {
	now := c.opts.clock()
	r := &rlqspb.RateLimitQuotaUsageReports{}
	if first {
		r.Domain = c.domain
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, b := range c.buckets {
		if !all && !b.lastReport.IsZero() {
			continue
		}
		allowed, denied := b.allowed.Swap(0), b.denied.Swap(0)
		if allowed+denied == 0 {
			if b.idle++; b.idle > c.opts.idle {
				delete(c.buckets, key)
				delete(c.keys, idOf(b.id.GetBucket()))
				continue
			}
		} else {
			b.idle = 0
		}
		var elapsed time.Duration
		if !b.lastReport.IsZero() {
			elapsed = now.Sub(b.lastReport)
		}
		b.lastReport = now
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           b.id,
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: allowed,
			NumRequestsDenied:  denied,
		})
	}
	if len(r.BucketQuotaUsages) == 0 {
		return nil
	}
	return r
}

// apply stores the server's actions.
func (c *Client) apply(resp *rlqspb.RateLimitQuotaResponse) {
	now := c.opts.clock()
	for _, a := range resp.GetBucketAction() {
		id := idOf(a.GetBucketId().GetBucket())
		c.mu.Lock()
		key, ok := c.keys[id]
		b := c.buckets[key]
		if ok && b != nil && a.GetAbandonAction() != nil {
			delete(c.buckets, key)
			delete(c.keys, id)
		}
		if !ok {
			b = nil
		}
		c.mu.Unlock()
		if b == nil || a.GetAbandonAction() != nil {
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		expires := now.Add(qa.GetAssignmentTimeToLive().AsDuration())
		if qa.GetAssignmentTimeToLive() == nil {
			expires = now.Add(100 * 365 * 24 * time.Hour) // no time to live: never expires
		}
		b.set(qa.GetRateLimitStrategy(), expires)
	}
}
