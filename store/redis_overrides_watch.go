package store

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Watching overrides (tollgate.OverrideWatcher). Every change of an
// override publishes on
//
//	<prefix>{!ov}:changed
//
// after the version (see announce). A subscriber reads the overrides again
// when a message arrives, and when its subscription is (re)established,
// since messages published while it was away are lost. On a Cluster the
// change is published on the channel's slot's primary, where go-redis
// subscribes, which delivers it without the cluster bus; on Sentinel the
// subscription follows the primary after a failover, and what was
// published in between is covered by the resubscription.

// watchPing is how long a subscription may stay silent before the watcher
// pings it, so that a dead connection is noticed and replaced.
const watchPing = 30 * time.Second

// watchBackoff bounds the pause between tries to subscribe while Redis
// cannot be reached.
const (
	watchBackoffMin = 50 * time.Millisecond
	watchBackoffMax = 2 * time.Second
)

// overrideChannel is the channel the overrides' changes are published on.
func (k *keySpace) overrideChannel() string { return k.prefix + "{!ov}:changed" }

// WatchOverrides subscribes to the store's override changes on a goroutine
// of its own, which stop ends (see tollgate.OverrideWatcher).
func (r *Redis) WatchOverrides(changed func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ps := r.client.Subscribe(ctx) // no channel yet: nothing is dialled here
	done := make(chan struct{})
	go func() {
		defer close(done)
		watch(ctx, ps, r.keys.overrideChannel(), changed)
	}()
	return func() {
		cancel()
		_ = ps.Close() // ends a Receive blocked on the connection
		<-done
	}
}

// watch runs the subscription to channel on ps until ctx ends, calling
// changed for every message and every (re)subscription.
func watch(ctx context.Context, ps *redis.PubSub, channel string, changed func()) {
	backoff := watchBackoffMin
	// Subscribe records the channel even when it cannot reach Redis; every
	// Receive then reconnects and subscribes again.
	_ = ps.Subscribe(ctx, channel)
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, watchPing)
		if ctx.Err() != nil {
			return
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			_ = ps.Ping(ctx) // a dead connection fails the next Receive
		case err != nil:
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, watchBackoffMax)
		default:
			backoff = watchBackoffMin
			switch msg.(type) {
			case *redis.Subscription, *redis.Message:
				changed()
			}
		}
	}
}

// bounded runs f under ctx and returns at ctx's end at the latest, whatever
// the client's options: when the client does not give up a command at its
// context's end (ContextTimeoutEnabled unset), f runs on a goroutine of its
// own, which ends at the client's ReadTimeout, and the caller leaves at
// ctx's deadline.
func bounded[T any](r *road, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); r.deadlineSafe || !ok {
		return f(ctx)
	}
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := f(ctx)
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
