package store

import (
	"context"
	"fmt"
	"time"

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

// slotPart is what makes a call a slot call: its arguments as sent alone
// (EVALSHA sha 2 slots hold holdTTL op max id ttl, lua/doc.go), its
// operation, and once answered, the reply.
type slotPart struct {
	args  []any
	op    string
	reply slotReply
}

// slotCall runs op of the slot script for s and returns its reply. It goes
// through the batcher, as a decision does: concurrent slot calls share
// round trips and, folded, script calls (fold.go).
func (r *Redis) slotCall(ctx context.Context, s tollgate.Slot, op string) (slotReply, error) {
	if op == slotAcquire || op == slotRenew {
		if err := tollgate.ValidateSlot(s); err != nil {
			return slotReply{}, err
		}
	} else if len(s.Key) > tollgate.MaxKeyLen {
		return slotReply{}, fmt.Errorf("%w: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, len(s.Key), tollgate.MaxKeyLen)
	}
	prefix := r.keyPrefix(s.Key)
	c := calls.Get().(*call)
	c.groups, c.admit, c.err, c.now = 0, nil, nil, 0
	c.keys = c.keyBuf[:2]
	c.keys[0], c.keys[1] = keyOf(prefix, slotsCode, s.Key), keyOf(prefix, holdCode, s.Key)
	c.slot = &slotPart{op: op, args: []any{nil, nil, int64(2), &c.keys[0], &c.keys[1],
		slotHoldTTL.Milliseconds(), op, s.Max, s.ID, s.TTL.Microseconds()}}
	c.deadline, _ = ctx.Deadline()
	if err := r.send(ctx, c); err != nil {
		// c stays with the abandoned call: its keys are the arguments.
		return slotReply{}, fmt.Errorf("tollgate: redis store: slot: %w", err)
	}
	g, err := c.slot.reply, c.err
	c.slot = nil
	calls.Put(c)
	if err != nil {
		return slotReply{}, fmt.Errorf("tollgate: redis store: slot: %w", err)
	}
	return g, nil
}
