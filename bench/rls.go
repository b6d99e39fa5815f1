package bench

import (
	"context"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// FixedWindowRLS answers ShouldRateLimit the way envoyproxy/ratelimit's
// Redis cache does, for the measurement's single limit: every descriptor's
// key is the domain, its entries and the current window's start, and one
// pipeline sends INCRBY hits and EXPIRE unit for each descriptor; a
// descriptor is over the limit when its count passes Limit. It does no
// configuration matching: every descriptor gets Limit per Unit.
type FixedWindowRLS struct {
	pb.UnimplementedRateLimitServiceServer
	Client redis.UniversalClient
	Prefix string
	Limit  uint32
	Unit   time.Duration
}

// ShouldRateLimit increments every descriptor's window counter.
func (s *FixedWindowRLS) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	unit := int64(s.Unit / time.Second)
	window := time.Now().Unix() / unit * unit
	hits := int64(max(1, req.HitsAddend))
	pipe := s.Client.Pipeline()
	counts := make([]*redis.IntCmd, len(req.Descriptors))
	for i, d := range req.Descriptors {
		var b strings.Builder
		b.WriteString(s.Prefix + req.Domain + "_")
		for _, e := range d.Entries {
			b.WriteString(e.Key + "_" + e.Value + "_")
		}
		b.WriteString(strconv.FormatInt(window, 10))
		counts[i] = pipe.IncrBy(ctx, b.String(), hits)
		pipe.Expire(ctx, b.String(), s.Unit)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for _, c := range counts {
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		if n := c.Val(); n > int64(s.Limit) {
			st.Code, resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT, pb.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(int64(s.Limit) - n)
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}
