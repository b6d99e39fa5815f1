package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// Overrides on Redis (tollgate.OverrideStore). An override of key in scope
// is
//
//	<prefix>{<key's tag>}:ov:<hash of scope>   its limits, with the override's TTL
//
// on the identity's own slot; each scope has an index, a hash of every key
// it overrides to the same limits, and one version counts every change:
//
//	<prefix>{!ov!<hash of scope>}:index
//	<prefix>{!ov!<hash of scope>}:gen     counts the index's changes
//	<prefix>{!ov}:version
//
// A tag never starts with "!" (an identity's "!" is escaped), so no
// identity names these. The index, its generation and the version are
// configuration, kept without a TTL; a field whose override expired is
// dropped when the scope is listed, unless the index changed meanwhile. A
// change writes the override, then the index, then the version, then
// announces it (change), so a replica that sees the new version finds the
// change.

// SetOverride stores o in scope for ttl (0: until deleted).
func (r *Redis) SetOverride(ctx context.Context, scope string, o tollgate.Override, ttl time.Duration) error {
	if err := checkOverride(ctx, o, ttl); err != nil {
		return err
	}
	enc := encodeLimits(o.Limits)
	_, err := bounded(&r.road, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.change(ctx,
			func(pipe redis.Pipeliner) { pipe.Set(ctx, r.keys.override(scope, o.Key), enc, ttl) },
			func(pipe redis.Pipeliner) {
				pipe.HSet(ctx, r.keys.overrideIndex(scope), o.Key, enc)
				pipe.Incr(ctx, r.keys.overrideIndexGen(scope))
			})
	})
	if err != nil {
		return fmt.Errorf("tollgate: redis store: set override: %w", err)
	}
	return nil
}

// change writes an override's key with key, then its index with index,
// then the new version, then the message to the store's watchers, in that
// order: a replica that hears the message reads the new version, one that
// reads the new version finds the index changed, and one that finds the
// index's field finds the override's key (a field whose key is missing is
// taken for an expired override's, and dropped: see overrides). One
// pipeline keeps that order on one node; a Cluster's pipeline sends each
// node's commands at once, so there each step waits for the one before,
// and the version and the message follow on their own node (announce).
func (r *Redis) change(ctx context.Context, key, index func(redis.Pipeliner)) error {
	pipe := r.client.Pipeline()
	for _, write := range []func(redis.Pipeliner){key, index} {
		write(pipe)
		if r.cluster != nil {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			pipe = r.client.Pipeline()
		}
	}
	r.announce(ctx, pipe)
	_, err := pipe.Exec(ctx)
	return err
}

// announce adds to pipe the INCR of the version and the PUBLISH of the
// change, in that order, both sent on a Cluster to the primary of the {!ov}
// slot: the node a watch subscribes on (go-redis subscribes to a channel
// on its slot's primary), which delivers the message to its subscribers
// itself. go-redis would send a PUBLISH, which names no key, to any node,
// which hands it to the others over the cluster bus: Valkey 8.0 loses a
// message sent on a bus link not yet established both ways (a node
// restarted or met again, a link re-made on a busy machine), so a watch
// that was subscribed missed the change (TestRedisWatchOverridesBusDown).
func (r *Redis) announce(ctx context.Context, pipe redis.Pipeliner) {
	pipe.Incr(ctx, r.keys.overrideVersion())
	msg := redis.NewIntCmd(ctx, "publish", r.keys.overrideChannel(), "1")
	msg.SetFirstKeyPos(1) // routed by the channel's slot, {!ov}
	_ = pipe.Process(ctx, msg)
}

// DeleteOverride removes key's override from scope.
func (r *Redis) DeleteOverride(ctx context.Context, scope, key string) error {
	if err := checkKey(ctx, key); err != nil {
		return err
	}
	_, err := bounded(&r.road, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.change(ctx,
			func(pipe redis.Pipeliner) { pipe.Del(ctx, r.keys.override(scope, key)) },
			func(pipe redis.Pipeliner) {
				pipe.HDel(ctx, r.keys.overrideIndex(scope), key)
				pipe.Incr(ctx, r.keys.overrideIndexGen(scope))
			})
	})
	if err != nil {
		return fmt.Errorf("tollgate: redis store: delete override: %w", err)
	}
	return nil
}

// Overrides returns scope's overrides in force: the index's keys whose
// override has not expired, each with the time it has left.
func (r *Redis) Overrides(ctx context.Context, scope string) ([]tollgate.Override, error) {
	return bounded(&r.road, ctx, func(ctx context.Context) ([]tollgate.Override, error) { return r.overrides(ctx, scope) })
}

// overrides is Overrides, unbounded.
func (r *Redis) overrides(ctx context.Context, scope string) ([]tollgate.Override, error) {
	index, gen := r.keys.overrideIndex(scope), r.keys.overrideIndexGen(scope)
	// The generation first, on the index's node: a field written after it
	// was read changes it, so the cleanup below leaves that field alone.
	pipe := r.client.Pipeline()
	genCmd, all := pipe.Get(ctx, gen), pipe.HGetAll(ctx, index)
	_, _ = pipe.Exec(ctx) // each command's error is its own
	if err := errors.Join(all.Err(), ignoreNil(genCmd.Err())); err != nil {
		return nil, fmt.Errorf("tollgate: redis store: overrides: %w", err)
	}
	fields, read := all.Val(), genCmd.Val()
	keys := make([]string, 0, len(fields))
	pttls := make([]*redis.DurationCmd, 0, len(fields))
	pipe = r.client.Pipeline()
	for k := range fields {
		keys = append(keys, k)
		pttls = append(pttls, pipe.PTTL(ctx, r.keys.override(scope, k)))
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("tollgate: redis store: overrides: %w", err)
		}
	}
	now := time.Now()
	var out []tollgate.Override
	var gone []string
	for i, k := range keys {
		left := pttls[i].Val()
		if left == -2 { // the override expired: its key is gone
			gone = append(gone, k)
			continue
		}
		limits, err := decodeLimits(fields[k])
		if err != nil {
			return nil, fmt.Errorf("tollgate: redis store: overrides: %s: %w", index, err)
		}
		o := tollgate.Override{Key: k, Limits: limits}
		if left > 0 {
			o.Expires = now.Add(left)
		}
		out = append(out, o)
	}
	if len(gone) > 0 {
		r.dropExpired(ctx, index, gen, read, gone)
	}
	return out, nil
}

// dropExpired removes the fields gone from index, whose overrides expired,
// unless the index changed since its generation read read: the override
// may have been set again meanwhile, and its field is then kept. Best
// effort: a field left behind is dropped at a later listing.
func (r *Redis) dropExpired(ctx context.Context, index, gen, read string, gone []string) {
	_ = r.client.Watch(ctx, func(tx *redis.Tx) error {
		now, err := tx.Get(ctx, gen).Result()
		if err != nil && !errors.Is(err, redis.Nil) || now != read {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HDel(ctx, index, gone...)
			return nil
		})
		return err
	}, gen)
}

// OverridesVersion returns the count of override changes.
func (r *Redis) OverridesVersion(ctx context.Context) (int64, error) {
	v, err := bounded(&r.road, ctx, func(ctx context.Context) (int64, error) {
		return r.client.Get(ctx, r.keys.overrideVersion()).Int64()
	})
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tollgate: redis store: overrides version: %w", err)
	}
	return v, nil
}

// override is the key of key's override in scope: on key's hash tag.
func (k *keySpace) override(scope, key string) string {
	var b strings.Builder
	b.WriteString(overrideCode + ":")
	appendHash(&b, scope)
	return keyOf(k.of(key), b.String(), key)
}

// overrideIndex is the key listing scope's overrides.
func (k *keySpace) overrideIndex(scope string) string { return k.overrideScope(scope, "index") }

// overrideIndexGen is the key counting the changes of scope's index, on
// the index's slot.
func (k *keySpace) overrideIndexGen(scope string) string { return k.overrideScope(scope, "gen") }

// overrideScope is scope's key named name, on the slot of scope's index.
func (k *keySpace) overrideScope(scope, name string) string {
	var b strings.Builder
	b.WriteString(k.prefix + "{!ov!")
	appendHash(&b, scope)
	b.WriteString("}:" + name)
	return b.String()
}

// overrideVersion is the key counting the overrides' changes.
func (k *keySpace) overrideVersion() string { return k.prefix + "{!ov}:version" }

// encodeLimits writes limits as "algorithm rate period-µs burst calendar"
// for each, separated by commas; "" for none.
func encodeLimits(limits []tollgate.Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = fmt.Sprintf("%d %d %d %d %d", l.Algorithm, l.Rate, l.Period.Microseconds(), l.Burst, l.Calendar)
	}
	return strings.Join(parts, ",")
}

// decodeLimits reads what encodeLimits wrote.
func decodeLimits(s string) ([]tollgate.Limit, error) {
	if s == "" {
		return nil, nil
	}
	var out []tollgate.Limit
	for _, part := range strings.Split(s, ",") {
		f := strings.Fields(part)
		if len(f) != 5 {
			return nil, fmt.Errorf("an override's limits %q are not what the store writes", s)
		}
		var n [5]int64
		for i, x := range f {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("an override's limits %q are not what the store writes", s)
			}
			n[i] = v
		}
		out = append(out, tollgate.Limit{Algorithm: tollgate.Algorithm(n[0]), Rate: n[1], Period: time.Duration(n[2]) * time.Microsecond, Burst: n[3], Calendar: tollgate.Calendar(n[4])})
	}
	return out, nil
}

// ignoreNil is err, unless it is redis.Nil: a key that is not there.
func ignoreNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}
