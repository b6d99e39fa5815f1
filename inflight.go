package tollgate

import (
	"context"
	"time"
)

// Slot asks for one of at most Max calls of one identity running at once
// (an in-flight limit), across every replica sharing the store.
type Slot struct {
	// Key is the identity, as Request.Key; an identity's slots are apart
	// from its rate-limit state.
	Key string
	// Max is how many slots the identity has: 1 to MaxRate.
	Max int64
	// ID names the slot the caller holds: a retry carrying the same id
	// while the slot is held reuses it. Printable ASCII, as RequestID.
	ID string
	// TTL is how long the slot lives unless released or renewed first (at
	// least 1ms): the store frees it then by itself, so a caller that
	// crashed holds it no longer.
	TTL time.Duration
	// Held, for ReleaseSlot, is how long the caller held the slot (0 for
	// unknown, or a call that never ran): the store keeps a recent mean of
	// the identity's hold times, fleet-wide, which AcquireSlot reports.
	Held time.Duration
}

// SlotDecision is a store's answer to AcquireSlot.
type SlotDecision struct {
	// Allowed reports whether the caller holds the slot now.
	Allowed bool
	// InUse is how many of the identity's slots are held after the
	// decision, this one included when it was allowed.
	InUse int64
	// Reused reports that ID held a slot already, which is kept.
	Reused bool
	// RetryAfter is, when denied, how long until the first held slot
	// expires: the latest a slot frees up if nobody releases one sooner.
	RetryAfter time.Duration
	// Hold is, when denied, the recent mean time the identity's slots were
	// held, as every caller that released one reported it (Slot.Held); 0
	// when none did lately. A slot usually frees up about then.
	Hold time.Duration
}

// SlotStore is a Store that also bounds calls in flight: its slots expire
// by the store's clock, so a caller that never releases one loses it after
// its TTL. Both stores of package store implement it.
type SlotStore interface {
	Store
	// AcquireSlot takes a slot of s.Key when fewer than s.Max are held
	// (expired ones do not count), or renews s.ID's when it holds one.
	AcquireSlot(ctx context.Context, s Slot) (SlotDecision, error)
	// RenewSlot moves s.ID's slot expiry to s.TTL from now, reporting
	// whether it was still held (false: it expired and is lost).
	RenewSlot(ctx context.Context, s Slot) (bool, error)
	// ReleaseSlot frees s.ID's slot; releasing a slot not held is not an
	// error.
	ReleaseSlot(ctx context.Context, s Slot) error
	// SlotsInUse reports how many slots of key are held now.
	SlotsInUse(ctx context.Context, key string) (int64, error)
}

// ValidateSlot reports whether s can be asked for, returning an error
// wrapping ErrInvalidRequest when it cannot.
func ValidateSlot(s Slot) error {
	switch {
	case len(s.Key) > MaxKeyLen:
		return invalid("key is %d bytes, more than %d", len(s.Key), MaxKeyLen)
	case s.Max < 1 || s.Max > MaxRate:
		return invalid("a slot's Max must be 1 to MaxRate (10^12), got %d", s.Max)
	case s.ID == "":
		return invalid("a slot needs an ID")
	case s.TTL < time.Millisecond:
		return invalid("a slot's TTL must be at least 1ms, got %s", s.TTL)
	}
	return ValidateRequestID(s.ID)
}

// SlotAllower is a SlotStore that takes a call's slot and decides its
// requests in one step (one script call on Redis), all or nothing: no
// request is debited when no slot is free, and the slot is taken only when
// every request is admitted (or replayed).
type SlotAllower interface {
	SlotStore
	// AllowAllWithSlot takes s and decides reqs as AllowAll does. When no
	// slot is free the decisions are nil (nothing was judged) and the
	// SlotDecision says why, as AcquireSlot's; otherwise they are
	// AllowAll's, and SlotDecision.Allowed reports whether the slot is now
	// held: exactly when every request was admitted.
	AllowAllWithSlot(ctx context.Context, s Slot, reqs []Request) (SlotDecision, []Decision, error)
}

// SlotSettler is a SlotStore that ends calls in one step (one script call
// on Redis where their keys allow): their settlements, then the release of
// their slots, so that no slot is freed before its call's settlement is
// recorded.
type SlotSettler interface {
	SlotStore
	// SettleAllAndRelease settles reqs as SettleAll does (none: nothing
	// to settle; the answers are then empty) and then releases the slots
	// of release, reporting each slot's Held.
	SettleAllAndRelease(ctx context.Context, reqs []Request, admitted []Decision, costs []int64, release []Slot) ([]Decision, error)
}
