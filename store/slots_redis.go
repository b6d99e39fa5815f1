package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lua"
)

// The slot script is idempotent per slot id (an id holds one slot; a
// release of a slot not held is nothing), but it answers what it found, so
// it is sent once like every script call and a lost reply is an error.
var slotScript = newScript(lua.Slot, sentOnce)

// Slot script operations (ARGV[1], lua/doc.go).
const (
	slotAcquire = "acquire"
	slotRenew   = "renew"
	slotRelease = "release"
	slotCount   = "count"
)

// slotHoldTTL is how long the mean hold time of an identity's slots is kept
// after its last release.
const slotHoldTTL = 10 * time.Minute

// slotReply is what the slot script answers to acquire and renew
// (lua/doc.go), field by field.
type slotReply [6]int64

const (
	slotAllowed    = iota // 1 held, 0 not
	slotHeld              // slots held after the operation
	slotReused            // 1 when the id held one already
	slotRetryAfter        // µs until the first held slot expires (a denied acquire)
	slotNow               // the server time, µs
	slotHold              // µs, the mean hold time (a denied acquire)
)

// readSlot decodes a slot script call's reply to op (lua/doc.go): a
// slotReply for acquire and renew, {1, now} for release and {held, now}
// for count, the latter two in the first two places of the slotReply.
func readSlot(cmd redis.Cmder, op string) (slotReply, error) {
	v, err := cmd.(scriptCmd).Result()
	if err != nil {
		return slotReply{}, err
	}
	want := len(slotReply{})
	if op == slotRelease || op == slotCount {
		want = 2
	}
	if len(v) != want {
		return slotReply{}, errBadReply
	}
	var g slotReply
	copy(g[:], v)
	return g, nil
}

// AcquireSlot takes a slot of s.Key, or renews s.ID's (see
// tollgate.SlotStore), with one slot script call on the identity's hash
// tag: the expired slots are dropped first, by the server's clock.
func (r *Redis) AcquireSlot(ctx context.Context, s tollgate.Slot) (tollgate.SlotDecision, error) {
	g, err := r.slotCall(ctx, s, slotAcquire)
	if err != nil {
		return tollgate.SlotDecision{}, err
	}
	return tollgate.SlotDecision{Allowed: g[slotAllowed] == 1, InUse: g[slotHeld], Reused: g[slotReused] == 1,
		RetryAfter: micros(g[slotRetryAfter]), Hold: micros(g[slotHold])}, nil
}

// RenewSlot moves s.ID's slot expiry to s.TTL from now (see
// tollgate.SlotStore).
func (r *Redis) RenewSlot(ctx context.Context, s tollgate.Slot) (bool, error) {
	g, err := r.slotCall(ctx, s, slotRenew)
	if err != nil {
		return false, err
	}
	return g[slotAllowed] == 1, nil
}

// ReleaseSlot frees s.ID's slot (see tollgate.SlotStore).
func (r *Redis) ReleaseSlot(ctx context.Context, s tollgate.Slot) error {
	if err := tollgate.ValidateRequestID(s.ID); err != nil {
		return err
	}
	s.Max, s.TTL = 1, max(s.Held, 0) // ARGV[4] of a release: the time held
	_, err := r.slotCall(ctx, s, slotRelease)
	return err
}

// SlotsInUse reports how many slots of key are held now.
func (r *Redis) SlotsInUse(ctx context.Context, key string) (int64, error) {
	g, err := r.slotCall(ctx, tollgate.Slot{Key: key, Max: 1, ID: "-", TTL: 1}, slotCount)
	if err != nil {
		return 0, err
	}
	return g[0], nil
}

// slotCall runs op of the slot script for s and returns its reply.
func (r *Redis) slotCall(ctx context.Context, s tollgate.Slot, op string) (slotReply, error) {
	if op == slotAcquire || op == slotRenew {
		if err := tollgate.ValidateSlot(s); err != nil {
			return slotReply{}, err
		}
	} else if len(s.Key) > tollgate.MaxKeyLen {
		return slotReply{}, fmt.Errorf("%w: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, len(s.Key), tollgate.MaxKeyLen)
	}
	prefix := r.keyPrefix(s.Key)
	sc := [1]scriptCall{{script: slotScript, args: []any{nil, nil, 2, keyOf(prefix, slotsCode, s.Key), keyOf(prefix, holdCode, s.Key),
		op, s.Max, s.ID, s.TTL.Microseconds(), slotHoldTTL.Milliseconds()}}}
	err := r.exchange(ctx, sc[:])
	var g slotReply
	if err == nil {
		g, err = readSlot(sc[0].cmd, op)
	}
	if err != nil {
		return slotReply{}, fmt.Errorf("tollgate: redis store: slot: %w", err)
	}
	return g, nil
}
