package tollgate

import (
	"context"
	"time"
)

// MaxShareMembers is the most members one shared limit holds at once; a
// member beyond them is granted nothing until one leaves.
const MaxShareMembers = 256

// Share is one member's report on a limit it shares with others: a data
// plane (an Envoy, a replica) asking for part of one global quota.
type Share struct {
	// Key is the shared limit's identity, as Request.Key.
	Key string
	// Member names the member: 1 to MaxRequestIDLen printable ASCII bytes
	// (as a RequestID).
	Member string
	// Limit is the whole to share, 1 to MaxRate units (per whatever
	// period the caller means; the store does not read one).
	Limit int64
	// Demand is what Member asks for, 0 to MaxRate units.
	Demand int64
	// TTL is how long Member keeps its demand and its grant without
	// another report, at least 1ms: a member that stops reporting leaves
	// when it ends.
	TTL time.Duration
}

// ShareGrant is a store's answer to a Share.
type ShareGrant struct {
	// Granted is Member's share now: its max-min fair share (Fair), less
	// while the other members still hold more than theirs, so that the
	// grants held never add up to more than Limit.
	Granted int64
	// Fair is Member's max-min fair share of Limit among the members'
	// demands (a member asking less than an equal split gets what it
	// asks, and what it leaves is split among the others the same way),
	// plus its part of half the spare: what the shares leave of Limit is
	// halved and split among the members as headroom, the other half
	// kept for members that join or grow.
	Fair int64
	// Members is how many members hold a grant, Member included.
	Members int
}

// ShareStore is a Store that also splits limits among the members sharing
// them, so that several quota servers on one store grant from the same
// demands. Both stores of package store implement it.
type ShareStore interface {
	Store
	// Share records s.Member's demand, drops members whose TTL ended,
	// and grants s.Member its share (see ShareGrant), in one step.
	Share(ctx context.Context, s Share) (ShareGrant, error)
}

// Validate reports whether s can be given to ShareStore.Share (see the
// bounds of its fields). Every error it returns wraps ErrInvalidRequest.
func (s Share) Validate() error {
	switch {
	case len(s.Key) > MaxKeyLen:
		return invalid("share key is %d bytes, more than %d", len(s.Key), MaxKeyLen)
	case s.Member == "":
		return invalid("share member is empty")
	case s.Limit < 1 || s.Limit > MaxRate:
		return invalid("share limit must be 1 to MaxRate (10^12), got %d", s.Limit)
	case s.Demand < 0 || s.Demand > MaxRate:
		return invalid("share demand must be 0 to MaxRate (10^12), got %d", s.Demand)
	case s.TTL < time.Millisecond || s.TTL > MaxPeriod:
		return invalid("share TTL must be 1ms to MaxPeriod, got %s", s.TTL)
	}
	return validRequestID(s.Member)
}
