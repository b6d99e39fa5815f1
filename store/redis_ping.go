package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Ping returns nil when Redis answers a PING within ctx (every primary of
// a Cluster), else the error: a server can check its store before it
// serves (tollgate.Pinger).
func (r *Redis) Ping(ctx context.Context) error {
	_, err := bounded(&r.road, ctx, func(ctx context.Context) (struct{}, error) {
		if r.cluster != nil {
			return struct{}{}, r.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.Ping(ctx).Err()
			})
		}
		return struct{}{}, r.client.Ping(ctx).Err()
	})
	if err != nil {
		return fmt.Errorf("tollgate: redis store: ping: %w", err)
	}
	return nil
}
