package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Summaries of refused identities on Redis (tollgate.RefusedStore). The
// summaries of a rule are one hash, a field per replica:
//
//	<prefix>{!rf!<hash of rule>}   replica → summary
//
// Each publication sets its replica's field and pushes the hash's expiry
// to ttl from now, so that the hash of a rule no replica refuses for ttl
// disappears; a replica gone stops publishing, and its field is dropped
// with the hash, or judged stale by its reader before that (the summary
// carries its time).

// PublishRefused keeps summary as replica's for rule, for ttl after the
// last publication of any replica.
func (r *Redis) PublishRefused(ctx context.Context, rule, replica string, summary []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("tollgate: redis store: publish refused: the ttl %v is not positive", ttl)
	}
	_, err := bounded(&r.road, ctx, func(ctx context.Context) (struct{}, error) {
		key := r.refusedKey(rule)
		_, err := r.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HSet(ctx, key, replica, summary)
			pipe.PExpire(ctx, key, ttl)
			return nil
		})
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("tollgate: redis store: publish refused: %w", err)
	}
	return nil
}

// RefusedSummaries returns the summaries of rule kept, by replica.
func (r *Redis) RefusedSummaries(ctx context.Context, rule string) (map[string][]byte, error) {
	fields, err := bounded(&r.road, ctx, func(ctx context.Context) (map[string]string, error) {
		return r.client.HGetAll(ctx, r.refusedKey(rule)).Result()
	})
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: refused summaries: %w", err)
	}
	out := make(map[string][]byte, len(fields))
	for replica, s := range fields {
		out[replica] = []byte(s)
	}
	return out, nil
}

// refusedKey is the hash of rule's summaries. A tag never starts with "!"
// (an identity's "!" is escaped), so no identity names it.
func (r *Redis) refusedKey(rule string) string {
	var b strings.Builder
	b.WriteString(r.prefix + "{!rf!")
	appendHash(&b, rule)
	b.WriteString("}")
	return b.String()
}
