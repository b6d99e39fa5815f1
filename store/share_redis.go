package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lua"
)

// The share script answers what it granted, so a copy run twice for one
// report would only record the same demand again; it is still sent once,
// like every script call, and a lost reply is an error.
var shareScript = newScript(lua.Share, sentOnce)

// DefaultShareTimeout bounds a Share call whose context has no deadline.
const DefaultShareTimeout = time.Second

var _ tollgate.ShareStore = (*Redis)(nil)

// Share records s.Member's demand on s.Key and grants it its share (see
// tollgate.ShareStore) with one share script call on the identity's hash
// tag, {tag}:sh: the members whose TTL ended are dropped first, by the
// server's clock. A context without a deadline is given
// DefaultShareTimeout.
func (r *Redis) Share(ctx context.Context, s tollgate.Share) (tollgate.ShareGrant, error) {
	if err := tollgate.ValidateShare(s); err != nil {
		return tollgate.ShareGrant{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultShareTimeout)
		defer cancel()
	}
	args := []any{nil, nil, 1, keyOf(r.keyPrefix(s.Key), shareCode, s.Key), s.Member, s.Limit, s.Demand, s.TTL.Microseconds(), tollgate.MaxShareMembers}
	cmd := r.shareCall(ctx, args)
	if cmd.IntSliceCmd == nil {
		return tollgate.ShareGrant{}, fmt.Errorf("tollgate: redis store: share: %w", ctx.Err())
	}
	v, err := cmd.Result()
	if err != nil {
		r.refreshRouting(err)
		return tollgate.ShareGrant{}, fmt.Errorf("tollgate: redis store: share: %w", err)
	}
	if len(v) != 4 {
		return tollgate.ShareGrant{}, fmt.Errorf("tollgate: redis store: share: %w", errBadReply)
	}
	return tollgate.ShareGrant{Granted: v[0], Fair: v[1], Members: int(v[2])}, nil
}

// shareCall sends one share script call and returns its command, or nil
// when ctx ended first: a client that does not give up a command at its
// context's end (go-redis without ContextTimeoutEnabled) runs it in a
// goroutine, left to finish alone, as the store's decisions do.
func (r *Redis) shareCall(ctx context.Context, args []any) scriptCmd {
	if r.deadlineSafe {
		return runScript(ctx, r.client, shareScript, args).(scriptCmd)
	}
	done := make(chan scriptCmd, 1)
	go func() { done <- runScript(ctx, r.client, shareScript, args).(scriptCmd) }()
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		return scriptCmd{}
	}
}
