package rls

import (
	"context"
	"math"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
)

// observe reads a bucket's report: its interval, and its demand per period
// of its limit (what it admitted and refused over the time elapsed). A
// report without time elapsed (a bucket's first) leaves them as they were.
func (b *streamBucket) observe(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	elapsed := u.GetTimeElapsed().AsDuration()
	if elapsed <= 0 {
		return
	}
	// Reports closer together than minDemandWindow add up: a demand read
	// over a few microseconds is noise.
	b.pending += u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	b.pendingFor += elapsed
	b.pendingDenied = b.pendingDenied || u.GetNumRequestsDenied() > 0
	if b.pendingFor < minDemandWindow {
		return
	}
	b.interval = b.pendingFor
	b.requests, b.elapsed, b.saturated = b.pending, b.pendingFor, b.pendingDenied
	b.pending, b.pendingFor, b.pendingDenied = 0, 0, false
}

// minDemandWindow is the shortest time a demand is read over.
const minDemandWindow = 50 * time.Millisecond

// demandPer is b's demand per period, with headroom: what it asked over
// the last report, plus 5% and one, so that a data plane at its demand is
// not refused its next few requests; -1 when no report said it.
func (b *streamBucket) demandPer(period time.Duration) int64 {
	if b.elapsed <= 0 {
		return -1
	}
	d := float64(b.requests) * float64(period) / float64(b.elapsed)
	d = math.Ceil(d)
	if d >= tollgate.MaxRate {
		return tollgate.MaxRate
	}
	n := int64(d)
	return min(tollgate.MaxRate, n+n/20+1)
}

// assign returns b's assignment now, or nil when the store could not
// grant one and the answer is AnswerUnavailable: the data plane keeps its
// assignment until it expires.
func (st *quotaStream) assign(ctx context.Context, b *streamBucket) *rlqspb.RateLimitQuotaResponse_BucketAction {
	ttl := st.ttl(b)
	cfg := st.q.srv.config.Load()
	d := cfg.domains[st.domain]
	if d == nil {
		b.sent = 0
		return blanket(b.id, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
	}
	if b.config != cfg {
		b.config = cfg
		b.match, b.found = d.matchBucket(b.id.GetBucket())
	}
	r := b.match.rule
	switch {
	case !b.found || r.unlimited || r.shadow:
		b.sent = 0
		return blanket(b.id, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
	case r.deny:
		b.sent = 0
		return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, ttl)
	}
	l := r.limits[0].limit
	period := limitPeriod(l)
	demand := b.demandPer(period)
	if demand < 0 {
		demand = l.Rate // not known yet: ask for the whole
	}
	req := tollgate.Share{Key: storeKey(d.name, b.match.entries, b.match.path), Member: st.member, Limit: l.Rate, Demand: demand, TTL: ttl}
	var g tollgate.ShareGrant
	res, _ := st.q.srv.callStore(ctx, d.name, func(ctx context.Context) (err error) {
		g, err = st.q.shares.Share(ctx, req)
		return err
	})
	if res != storecall.Decided {
		if st.q.srv.opts.storeFail == AnswerOK && res != storecall.Canceled {
			b.sent = 0
			return blanket(b.id, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
		}
		return nil
	}
	granted := g.Granted
	// A grant a little above the one sent keeps the one sent: a new
	// token bucket starts full in Envoy, so each change costs a burst.
	if b.sent > 0 && granted >= b.sent && granted-b.sent <= max(1, b.sent/20) {
		granted = b.sent
	}
	if granted == 0 {
		b.sent = 0
		return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, ttl)
	}
	// A data plane whose last report refused nothing holds a burst
	// beyond its share (its part of the limit's idle fills), so that
	// demand moving to it between reports is admitted before the next
	// one; a saturated one keeps the capacity it was sent (its bucket is
	// empty, and a new one would start full) until its share changes.
	capacity := granted
	if b.elapsed > 0 && !b.saturated {
		capacity += st.q.opts.idleBurst(l.Rate, g.Members)
	}
	if granted == b.sent && capacity < b.capacity {
		capacity = b.capacity
	}
	b.sent, b.capacity = granted, capacity
	return tokenBucket(b.id, granted, capacity, period, ttl)
}

// limitPeriod is l's period, a calendar window's being its length now.
func limitPeriod(l tollgate.Limit) time.Duration {
	if l.Calendar != tollgate.NoCalendar {
		return l.Calendar.Length(time.Now())
	}
	return l.Period
}

// tokenBucket is the assignment of a token bucket refilled with share
// tokens per period, holding capacity tokens at most (which a new bucket
// starts with): the period in whole seconds as the fill interval (Envoy
// reads no fraction of a second), the tokens scaled to it.
func tokenBucket(id *rlqspb.BucketId, share, capacity int64, period, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	fill := max(time.Second, period.Truncate(time.Second))
	scale := func(n int64) uint32 {
		if fill != period {
			n = max(1, int64(float64(n)*float64(fill)/float64(period)))
		}
		return uint32(min(n, math.MaxUint32))
	}
	return action(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     scale(max(share, capacity)),
		TokensPerFill: wrapperspb.UInt32(scale(share)),
		FillInterval:  durationpb.New(fill),
	}}})
}

// blanket is the assignment of a blanket rule.
func blanket(id *rlqspb.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return action(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}})
}

func action(id *rlqspb.BucketId, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    s,
		}},
	}
}
