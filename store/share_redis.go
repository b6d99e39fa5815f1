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
	"github.com/tollgate/tollgate/lua"
)

// The share script answers what it granted, so a copy run twice for one
// report would only record the same demand again; it is still sent once,
// like every script call, and a lost reply is an error.
var shareScript = newScript(lua.Share, sentOnceMixed)

// shareCmd is a share script call: sent at most once (as scriptCmd), its
// reply integers and the groups' names.
type shareCmd struct{ *redis.SliceCmd }

// NoRetry reports that the command must not be re-sent.
func (shareCmd) NoRetry() bool { return true }

func sentOnceMixed(ctx context.Context, args ...any) redis.Cmder {
	return shareCmd{redis.NewSliceCmd(ctx, args...)}
}

// defaultShareTimeout bounds a Share call whose context has no deadline.
const defaultShareTimeout = time.Second

// shareSlots is how many hash tags the shares spread over; the shares of
// one tag and the mark of the store's memory on its slot go together.
const shareSlots = 256

var _ tollgate.ShareStore = (*Redis)(nil)

// Share records s.Member's demand on s.Key and grants it its share (see
// tollgate.ShareStore) with one share script call. A context without a
// deadline is given one second.
//
// The shares of s.Key are one hash, <prefix>{!sh<n>}/<key>:sh, n of 256
// tags chosen by the key, beside the tag's mark <prefix>{!sh<n>}:mark (a
// limit shared by a known number of groups reads it: a mark gone or
// written by another server process means the store may have forgotten
// grants, see tollgate.ShareGrant.Settling). The members whose lease
// ended are dropped first, by the server's clock.
func (r *Redis) Share(ctx context.Context, s tollgate.Share) (tollgate.ShareGrant, error) {
	gs, err := r.ShareAll(ctx, []tollgate.Share{s})
	if err != nil {
		return tollgate.ShareGrant{}, err
	}
	return gs[0], nil
}

// ShareAll is Share of every report in one round trip (a pipeline, which
// a Cluster client splits by node), answered in order. An invalid report
// fails them all before any is sent.
func (r *Redis) ShareAll(ctx context.Context, shares []tollgate.Share) ([]tollgate.ShareGrant, error) {
	for _, s := range shares {
		if err := s.Validate(); err != nil {
			return nil, err
		}
	}
	calls := make([]scriptCall, len(shares))
	for i, s := range shares {
		key, mark := r.shareKeys(s.Key)
		calls[i] = scriptCall{script: shareScript, args: []any{nil, nil, 2, key, mark, "report",
			s.Member, s.Group, s.Seq, s.Groups, s.Floor, s.Limit, s.Window, s.Demand, s.Used, s.Hold,
			s.TTL.Microseconds(), s.WindowTTL.Microseconds(), tollgate.MaxShareMembers}}
	}
	if err := r.shareCalls(ctx, calls); err != nil {
		return nil, fmt.Errorf("tollgate: redis store: share: %w", err)
	}
	out := make([]tollgate.ShareGrant, len(calls))
	for i := range calls {
		g, err := readShare(calls[i].cmd)
		if err != nil {
			return nil, fmt.Errorf("tollgate: redis store: share: %w", err)
		}
		out[i] = g
	}
	return out, nil
}

// LookShare answers what Share would see of key's groups in window (0 for
// a rate), writing nothing: Others holds every group, Members every
// member, Settling what is left of the settling after a mark of lease
// (the whole lease when the mark is gone); Granted and Fair are 0.
func (r *Redis) LookShare(ctx context.Context, key string, window int64, lease time.Duration) (tollgate.ShareGrant, error) {
	if len(key) > tollgate.MaxKeyLen || window < 0 || lease < 0 {
		return tollgate.ShareGrant{}, fmt.Errorf("%w: look share: a key of at most %d bytes, a window and a lease of 0 or more", tollgate.ErrInvalidRequest, tollgate.MaxKeyLen)
	}
	k, mark := r.shareKeys(key)
	g, err := askAgain(ctx, func() (tollgate.ShareGrant, error) {
		calls := []scriptCall{{script: shareScript, args: []any{nil, nil, 2, k, mark, "look", window, lease.Microseconds()}}}
		if err := r.shareCalls(ctx, calls); err != nil {
			return tollgate.ShareGrant{}, err
		}
		return readShare(calls[0].cmd)
	})
	if err != nil {
		return tollgate.ShareGrant{}, fmt.Errorf("tollgate: redis store: look share: %w", err)
	}
	return g, nil
}

// shareCalls sends calls through the store's one send path, under
// defaultShareTimeout when ctx has no deadline.
func (r *Redis) shareCalls(ctx context.Context, calls []scriptCall) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultShareTimeout)
		defer cancel()
	}
	return r.exchange(ctx, calls) // on an error the calls are abandoned: their cmds are not to be read
}

// shareKeys returns the hash of key's shares and its tag's mark.
func (r *Redis) shareKeys(key string) (hash, mark string) {
	tag := r.prefix + "{!sh" + strconv.Itoa(shareSlot(key)) + "}"
	var b strings.Builder
	b.Grow(len(tag) + 4 + len(key))
	b.WriteString(tag)
	b.WriteByte('/')
	appendPart(&b, key)
	b.WriteString(":" + shareCode)
	return b.String(), tag + ":mark"
}

// shareSlot is key's tag among shareSlots: FNV-1a, as tagOf.
func shareSlot(key string) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	return int(h % shareSlots)
}

var errShareCode = errors.New("unknown refusal from the share script")

// readShare decodes a share script call's reply (lua/doc.go): a header of
// five integers, then six fields per other group.
func readShare(cmd redis.Cmder) (tollgate.ShareGrant, error) {
	v, err := cmd.(shareCmd).Result()
	if err != nil {
		return tollgate.ShareGrant{}, err
	}
	if len(v) < 5 || (len(v)-5)%6 != 0 {
		return tollgate.ShareGrant{}, errBadReply
	}
	var head [5]int64
	for i := range head {
		n, ok := v[i].(int64)
		if !ok {
			return tollgate.ShareGrant{}, errBadReply
		}
		head[i] = n
	}
	g := tollgate.ShareGrant{Granted: head[0], Fair: head[1], Members: int(head[2]), At: time.UnixMicro(head[3]),
		Settling: time.Duration(head[4]) * time.Microsecond}
	switch head[0] {
	case -1:
		return tollgate.ShareGrant{At: g.At, Refused: tollgate.ErrShareDisagree}, nil
	case -2:
		return tollgate.ShareGrant{At: g.At, Refused: tollgate.ErrShareStale}, nil
	case -3:
		return tollgate.ShareGrant{At: g.At, Refused: tollgate.ErrShareLate}, nil
	}
	if head[0] < 0 {
		return tollgate.ShareGrant{}, errShareCode
	}
	for i := 5; i < len(v); i += 6 {
		name, ok := v[i].(string)
		var n [5]int64
		for j := range n {
			x, isInt := v[i+1+j].(int64)
			ok = ok && isInt
			n[j] = x
		}
		if !ok {
			return tollgate.ShareGrant{}, errBadReply
		}
		g.Others = append(g.Others, tollgate.ShareHolding{Group: name, Members: int(n[0]), Share: n[1], Demand: n[2], Used: n[3],
			Left: time.Duration(n[4]) * time.Microsecond})
	}
	return g, nil
}
