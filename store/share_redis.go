package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/lua"
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
	if err := s.Validate(); err != nil {
		return tollgate.ShareGrant{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultShareTimeout)
		defer cancel()
	}
	sc := [1]scriptCall{{script: shareScript, args: []any{nil, nil, 1, keyOf(r.keyPrefix(s.Key), shareCode, s.Key),
		s.Member, s.Limit, s.Demand, s.TTL.Microseconds(), tollgate.MaxShareMembers}}}
	err := r.exchange(ctx, sc[:])
	var v shareReply
	if err == nil { // else the call is abandoned: its cmd is not to be read
		v, err = readShare(sc[0].cmd)
	}
	if err != nil {
		return tollgate.ShareGrant{}, fmt.Errorf("tollgate: redis store: share: %w", err)
	}
	return tollgate.ShareGrant{Granted: v.granted, Fair: v.fair, Members: int(v.members)}, nil
}

// shareReply is what the share script answers (lua/doc.go), field by field.
type shareReply struct{ granted, fair, members, now int64 }

// readShare decodes a share script call's reply.
func readShare(cmd redis.Cmder) (shareReply, error) {
	v, err := cmd.(scriptCmd).Result()
	if err != nil {
		return shareReply{}, err
	}
	if len(v) != 4 {
		return shareReply{}, errBadReply
	}
	return shareReply{granted: v[0], fair: v[1], members: v[2], now: v[3]}, nil
}
