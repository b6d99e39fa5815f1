package tollgate

import (
	"context"
	"time"
)

// Seat asks for one of at most Max calls of one identity running at once
// (an in-flight limit), across every replica sharing the store.
type Seat struct {
	// Key is the identity, as Request.Key; an identity's seats are apart
	// from its rate-limit state.
	Key string
	// Max is how many seats the identity has: 1 to MaxRate.
	Max int64
	// ID names the seat the caller holds: a retry carrying the same id
	// while the seat is held reuses it. Printable ASCII, as RequestID.
	ID string
	// TTL is how long the seat lives unless released or renewed first (at
	// least 1ms): the store frees it then by itself, so a caller that
	// crashed holds it no longer.
	TTL time.Duration
	// Hold, for ReleaseSeat, is how long the caller held the seat (0 for
	// unknown, or a call that never ran): the store keeps a recent mean of
	// the identity's hold times, fleet-wide, which AcquireSeat reports
	// (SeatDecision.Hold).
	Hold time.Duration
}

// SeatDecision is a store's answer to AcquireSeat.
type SeatDecision struct {
	// Allowed reports whether the caller holds the seat now.
	Allowed bool
	// InUse is how many of the identity's seats are held after the
	// decision, this one included when it was allowed.
	InUse int64
	// Reused reports that ID held a seat already, which is kept.
	Reused bool
	// RetryAfter is, when denied, how long until the first held seat
	// expires: the latest a seat frees up if nobody releases one sooner.
	RetryAfter time.Duration
	// Hold is, when denied, the recent mean time the identity's seats were
	// held, as every caller that released one reported it (Seat.Hold); 0
	// when none did lately. A seat usually frees up about then.
	Hold time.Duration
}

// SeatStore is a Store that also bounds calls in flight: its seats expire
// by the store's clock, so a caller that never releases one loses it after
// its TTL. Both stores of package store implement it.
type SeatStore interface {
	Store
	// AcquireSeat takes a seat of s.Key when fewer than s.Max are held
	// (expired ones do not count), or renews s.ID's when it holds one.
	AcquireSeat(ctx context.Context, s Seat) (SeatDecision, error)
	// RenewSeat moves s.ID's seat expiry to s.TTL from now, reporting
	// whether it was still held (false: it expired and is lost).
	RenewSeat(ctx context.Context, s Seat) (bool, error)
	// ReleaseSeat frees s.ID's seat; releasing a seat not held is not an
	// error.
	ReleaseSeat(ctx context.Context, s Seat) error
	// SeatsInUse reports how many seats of key are held now.
	SeatsInUse(ctx context.Context, key string) (int64, error)
}

// Validate reports whether s can be asked for: a Key of at most MaxKeyLen
// bytes, Max from 1 to MaxRate, an ID (printable ASCII, as a RequestID) and
// a TTL of at least 1ms. Every error it returns wraps ErrInvalidRequest.
func (s Seat) Validate() error {
	switch {
	case len(s.Key) > MaxKeyLen:
		return invalid("key is %d bytes, more than %d", len(s.Key), MaxKeyLen)
	case s.Max < 1 || s.Max > MaxRate:
		return invalid("a seat's Max must be 1 to MaxRate (10^12), got %d", s.Max)
	case s.ID == "":
		return invalid("a seat needs an ID")
	case s.TTL < time.Millisecond:
		return invalid("a seat's TTL must be at least 1ms, got %s", s.TTL)
	}
	return validRequestID(s.ID)
}

// SeatAllower is a SeatStore that takes a call's seat and decides its
// requests in one step (one script call on Redis), all or nothing: no
// request is debited when no seat is free, and the seat is taken only when
// every request is admitted (or replayed).
type SeatAllower interface {
	SeatStore
	// AllowAllWithSeat takes s and decides reqs as AllowAll does. When no
	// seat is free the decisions are nil (nothing was judged) and the
	// SeatDecision says why, as AcquireSeat's; otherwise they are
	// AllowAll's, and SeatDecision.Allowed reports whether the seat is now
	// held: exactly when every request was admitted.
	AllowAllWithSeat(ctx context.Context, s Seat, reqs []Request) (SeatDecision, []Decision, error)
}

// SeatSettler is a SeatStore and a Settler that ends calls in one step
// (one script call on Redis where their keys allow): their settlements,
// then the release of their seats, so that no seat is freed before its
// call's settlement is recorded.
type SeatSettler interface {
	SeatStore
	Settler
	// SettleAllAndRelease settles reqs as SettleAll does (none: nothing
	// to settle; the answers are then empty) and then releases the seats
	// of release, reporting each seat's Hold.
	SettleAllAndRelease(ctx context.Context, reqs []Request, admitted []Admission, costs []int64, release []Seat) ([]Decision, error)
}
