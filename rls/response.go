package rls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
	"google.golang.org/protobuf/types/known/durationpb"
)

// status is the check's DescriptorStatus, describing its shown limit.
func (c *check) status() *pb.RateLimitResponse_DescriptorStatus {
	switch c.kind {
	case kindNone:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	case kindUnlimited:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	i := c.shown()
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: c.rule.limits[i].current}
	over := c.kind == kindDenied
	if c.decided {
		d := c.decs[i]
		st.LimitRemaining = uint32(min(c.remaining(i), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(resetAfter(d, c.reqs[i].Limit))
		switch {
		case c.kind == kindEnforced && overLimit(d),
			(c.kind == kindOverdraw || c.kind == kindShadow) && !d.Allowed,
			c.kind == kindPeek && c.outcome == storecall.OutcomeDenied:
			over = true
		}
	}
	switch {
	case over && !c.soft:
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	case over && c.quota:
		// Quota mode, as envoyproxy/ratelimit answers it: OK, the limit
		// and what remains, no reset; the metadata names the descriptor.
		st.DurationUntilReset = nil
	}
	return st
}

// overQuota reports whether the check is in quota mode and over its limit:
// a violation the dynamic metadata reports.
func (c *check) overQuota() bool {
	if !c.quota || c.rule == nil {
		return false
	}
	return c.kind == kindDenied || c.decided && !c.decs[c.shown()].Allowed
}

// resetAfter is d's ResetAfter as a response reports it: a fixed window's
// in whole seconds, rounded up, as envoyproxy/ratelimit reports it (its
// windows start on whole seconds, so the rounding only drops the
// request's own sub-second offset); other algorithms' exactly.
func resetAfter(d tollgate.Decision, l tollgate.Limit) time.Duration {
	if l.Algorithm != tollgate.FixedWindow {
		return d.ResetAfter
	}
	return (d.ResetAfter + time.Second - 1) / time.Second * time.Second
}

// shown is the index of the limit the check's status describes: the one
// over its limit with the longest wait, else the one with the fewest units
// left.
func (c *check) shown() int {
	best := 0
	if !c.decided {
		return best
	}
	for i, d := range c.decs {
		b := c.decs[best]
		switch {
		case overLimit(d) != overLimit(b):
			if overLimit(d) {
				best = i
			}
		case overLimit(d):
			if d.RetryAfter > b.RetryAfter {
				best = i
			}
		case c.remaining(i) < c.remaining(best):
			best = i
		}
	}
	return best
}

// overLimit reports whether the store found d over its limit. In a refused
// set, the limits that had room are not allowed (nothing was debited) but
// were not over their limit either: their RetryAfter is 0.
func overLimit(d tollgate.Decision) bool { return !d.Allowed && d.RetryAfter > 0 }

// remaining is what is left under limit i after this request. A store
// reports the Remaining a decision would leave; where that decision was not
// applied (a limit with room in a refused set, or a look with hits_addend
// 0), nothing was taken, so the cost is still there.
func (c *check) remaining(i int) int64 {
	d, req := c.decs[i], c.reqs[i]
	notTaken := c.kind == kindPeek && d.Allowed || c.kind == kindEnforced && !d.Allowed && !overLimit(d)
	if c.kind == kindPeek && d.Debt > 0 {
		return 0
	}
	if !notTaken {
		return d.Remaining
	}
	return min(d.Remaining+max(req.Cost, 1), req.Limit.Capacity())
}

// headers returns the response headers for the descriptor closest to its
// limit, an over-limit one winning, as envoyproxy/ratelimit picks it.
func (s *Server) headers(checks []check) []*corev3.HeaderValue {
	var pick *check
	var pickStatus *pb.RateLimitResponse_DescriptorStatus
	for i := range checks {
		c := &checks[i]
		if c.rule == nil || c.kind == kindUnlimited {
			continue
		}
		st := c.status()
		if pick == nil || st.Code == pb.RateLimitResponse_OVER_LIMIT || (pickStatus.Code != pb.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pickStatus.LimitRemaining) {
			pick, pickStatus = c, st
		}
	}
	if pick == nil {
		return nil
	}
	reset := int64(0)
	if pick.decided {
		reset = int64((pick.decs[pick.shown()].ResetAfter + time.Second - 1) / time.Second)
	}
	n := s.opts.headerNames
	return []*corev3.HeaderValue{
		{Key: n[0], Value: strconv.FormatUint(uint64(pickStatus.CurrentLimit.GetRequestsPerUnit()), 10)},
		{Key: n[1], Value: strconv.FormatUint(uint64(pickStatus.LimitRemaining), 10)},
		{Key: n[2], Value: strconv.FormatInt(reset, 10)},
	}
}
