package store

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lua"
)

// The slot script is idempotent per slot id (an id holds one slot; a
// release of a slot not held is nothing), but it answers what it found, so
// it is sent once like every script call and a lost reply is an error.
var slotScript = newScript(lua.Slot, sentOnce)

// AcquireSlot takes a slot of s.Key, or renews s.ID's (see
// tollgate.SlotStore), with one slot script call on the identity's hash
// tag: the expired slots are dropped first, by the server's clock.
func (r *Redis) AcquireSlot(ctx context.Context, s tollgate.Slot) (tollgate.SlotDecision, error) {
	v, err := r.slotCall(ctx, s, "acquire")
	if err != nil {
		return tollgate.SlotDecision{}, err
	}
	if len(v) != 5 {
		return tollgate.SlotDecision{}, fmt.Errorf("tollgate: redis store: slot: %w", errBadReply)
	}
	return tollgate.SlotDecision{Allowed: v[0] == 1, InUse: v[1], Reused: v[2] == 1, RetryAfter: micros(v[3])}, nil
}

// RenewSlot moves s.ID's slot expiry to s.TTL from now (see
// tollgate.SlotStore).
func (r *Redis) RenewSlot(ctx context.Context, s tollgate.Slot) (bool, error) {
	v, err := r.slotCall(ctx, s, "renew")
	if err != nil {
		return false, err
	}
	if len(v) != 5 {
		return false, fmt.Errorf("tollgate: redis store: slot: %w", errBadReply)
	}
	return v[0] == 1, nil
}

// ReleaseSlot frees s.ID's slot (see tollgate.SlotStore).
func (r *Redis) ReleaseSlot(ctx context.Context, s tollgate.Slot) error {
	if err := tollgate.ValidateRequestID(s.ID); err != nil {
		return err
	}
	s.Max, s.TTL = 1, 1 // not read by a release
	_, err := r.slotCall(ctx, s, "release")
	return err
}

// SlotsInUse reports how many slots of key are held now.
func (r *Redis) SlotsInUse(ctx context.Context, key string) (int64, error) {
	v, err := r.slotCall(ctx, tollgate.Slot{Key: key, Max: 1, ID: "-", TTL: 1}, "count")
	if err != nil {
		return 0, err
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("tollgate: redis store: slot: %w", errBadReply)
	}
	return v[0], nil
}

// slotCall runs op of the slot script for s and returns its reply.
func (r *Redis) slotCall(ctx context.Context, s tollgate.Slot, op string) ([]int64, error) {
	if op == "acquire" || op == "renew" {
		if err := tollgate.ValidateSlot(s); err != nil {
			return nil, err
		}
	} else if len(s.Key) > tollgate.MaxKeyLen {
		return nil, fmt.Errorf("%w: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, len(s.Key), tollgate.MaxKeyLen)
	}
	args := []any{nil, nil, 1, keyOf(r.keyPrefix(s.Key), slotsCode, s.Key), op, s.Max, s.ID, s.TTL.Microseconds()}
	v, err := runScript(ctx, r.client, slotScript, args).(scriptCmd).Result()
	if err != nil {
		r.refreshRouting(err)
		return nil, fmt.Errorf("tollgate: redis store: slot: %w", err)
	}
	return v, nil
}
