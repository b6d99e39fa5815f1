package region

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/store"
)

// defaultHomePrefix starts every key NewRedisHome's Home writes.
const defaultHomePrefix = "tollgate:region:"

// defaultHomeTimeout bounds a Home call whose context has no deadline.
const defaultHomeTimeout = 2 * time.Second

// redisHome is a Home on one Redis (single node, Sentinel or Cluster,
// through redis.UniversalClient): the share store of package store
// (store.Redis.ShareAll), one hash per identity and limit updated by one
// short script per report, sent as every script of the store is (EVALSHA,
// loaded on each new connection, never re-sent after a lost reply). The
// reports of one Share call go in one pipeline.
type redisHome struct {
	shares *store.Redis
}

var _ Home = (*redisHome)(nil)

// NewRedisHome returns a Home on rdb whose keys start with prefix
// ("tollgate:region:" when empty). It writes nothing. A nil rdb (typed or
// not) or a prefix with braces is an error.
func NewRedisHome(rdb redis.UniversalClient, prefix string) (Home, error) {
	if check.Nil(rdb) {
		return nil, fmt.Errorf("%w: the home's Redis client is nil", ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = defaultHomePrefix
	}
	// No failover journal: a share is a lease the store never debits again.
	st, err := store.NewRedis(rdb, store.WithPrefix(prefix), store.WithJournal(0))
	if err != nil {
		return nil, fmt.Errorf("%w: the home: %v", ErrInvalidConfig, err)
	}
	return &redisHome{shares: st}, nil
}

// Share sends every report in one pipeline (the Cluster client splits it
// by node) and decodes the answers.
func (h *redisHome) Share(ctx context.Context, reports []tollgate.Share) ([]tollgate.ShareGrant, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	gs, err := h.shares.ShareAll(ctx, reports)
	if err != nil {
		return nil, fmt.Errorf("region: redis home: %w", err)
	}
	return gs, nil
}

// Look reads what the Home holds of key in window.
func (h *redisHome) Look(ctx context.Context, key string, window int64, lease time.Duration) (tollgate.ShareGrant, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	g, err := h.shares.LookShare(ctx, key, window, lease)
	if err != nil {
		return tollgate.ShareGrant{}, fmt.Errorf("region: redis home: %w", err)
	}
	return g, nil
}

// withDefaultTimeout gives ctx defaultHomeTimeout when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultHomeTimeout)
}
