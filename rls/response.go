package rls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// status is the check's DescriptorStatus.
func (c *check) status() *pb.RateLimitResponse_DescriptorStatus {
	switch c.kind {
	case kindNone:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	case kindUnlimited:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: c.rule.current}
	if c.kind == kindDenied && !c.rule.shadow {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	if c.decided {
		st.LimitRemaining = uint32(min(c.remaining(), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(c.dec.ResetAfter)
		if c.kind == kindEnforced && c.overLimit() {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	return st
}

// overLimit reports whether the store found the descriptor over its limit.
// In a refused set, the descriptors that had room are not allowed (nothing
// was debited) but were not over their limit either: their RetryAfter is 0.
func (c *check) overLimit() bool { return !c.dec.Allowed && c.dec.RetryAfter > 0 }

// remaining is what is left for the descriptor after this request. A store
// reports the Remaining a decision would leave; where that decision was not
// applied (a descriptor with room in a refused set, or a look with
// hits_addend 0), nothing was taken, so the cost is still there.
func (c *check) remaining() int64 {
	notTaken := c.kind == kindPeek && c.dec.Allowed || c.kind == kindEnforced && !c.dec.Allowed && !c.overLimit()
	if !notTaken {
		return c.dec.Remaining
	}
	return min(c.dec.Remaining+max(c.req.Cost, 1), c.req.Limit.Capacity())
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
		reset = int64((pick.dec.ResetAfter + time.Second - 1) / time.Second)
	}
	n := s.opts.headerNames
	return []*corev3.HeaderValue{
		{Key: n[0], Value: strconv.FormatUint(uint64(pickStatus.CurrentLimit.GetRequestsPerUnit()), 10)},
		{Key: n[1], Value: strconv.FormatUint(uint64(pickStatus.LimitRemaining), 10)},
		{Key: n[2], Value: strconv.FormatInt(reset, 10)},
	}
}
