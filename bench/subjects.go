package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/tollgate/tollgate"
)

// Decider is one rate limiter under test: it decides for one identity
// under the limit it was built with. requestID is "" for none; a limiter
// without request ids ignores it.
type Decider interface {
	Decide(ctx context.Context, identity, requestID string) (allowed bool, err error)
}

// Tollgate decides with a tollgate store.
type Tollgate struct {
	Store tollgate.Store
	Limit tollgate.Limit
	// ReplayTTL is each request id's Request.ReplayTTL: 0 for the store's
	// default, or what the interceptor sets for a call with a deadline
	// (its time left plus a margin).
	ReplayTTL time.Duration
}

// Decide asks the store for one decision of cost 1.
func (t Tollgate) Decide(ctx context.Context, identity, requestID string) (bool, error) {
	req := tollgate.Request{Key: identity, Limit: t.Limit, RequestID: requestID}
	if requestID != "" {
		req.ReplayTTL = t.ReplayTTL
	}
	d, err := t.Store.Allow(ctx, req)
	return d.Allowed, err
}

// RedisRate decides with github.com/go-redis/redis_rate.
type RedisRate struct {
	Limiter *redis_rate.Limiter
	Limit   redis_rate.Limit
}

// Decide asks redis_rate for one decision of cost 1; it has no request ids.
func (r RedisRate) Decide(ctx context.Context, identity, _ string) (bool, error) {
	res, err := r.Limiter.Allow(ctx, identity, r.Limit)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

// RedisRateLimit converts a GCRA or token-bucket tollgate limit to the
// redis_rate limit with the same Rate, Burst and Period.
func RedisRateLimit(l tollgate.Limit) redis_rate.Limit {
	if l.Rate > int64(^uint(0)>>1) || l.Capacity() > int64(^uint(0)>>1) {
		panic(fmt.Sprintf("bench: %s does not fit redis_rate's int fields", l))
	}
	return redis_rate.Limit{Rate: int(l.Rate), Burst: int(l.Capacity()), Period: l.Period}
}
