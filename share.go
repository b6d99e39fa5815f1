package tollgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxShareMembers is the most members one shared limit holds at once; a
// member beyond them is granted nothing until one leaves.
const MaxShareMembers = 256

// Share is one member's report on a limit it shares with others: a data
// plane (an Envoy, a replica) asking for part of one global quota. A member
// may belong to a Group (a region and its replicas): the shares are then
// max-min fair among the groups, by their members' demands summed, and
// every member of a group is granted the group's share.
//
// The words are the same wherever a quota is split: a member's share is
// what it may use, its lease (TTL) how long it may use it without another
// report, and a group's floor what is reserved for it whatever the others
// ask (docs/multi-region.md).
type Share struct {
	// Key is the shared limit's identity, as Request.Key.
	Key string
	// Member names the member: 1 to MaxRequestIDLen printable ASCII bytes
	// (as a RequestID).
	Member string
	// Group names the member's group, as Member; "" makes the member a
	// group of its own.
	Group string
	// Limit is the whole to share, 1 to MaxRate units (per whatever
	// period the caller means; the store does not read one), or the units
	// of one window (Window).
	Limit int64
	// Demand is what Member asks for, 0 to MaxRate units: of a rate, units
	// per its period; of a window, units over the next TTL.
	Demand int64
	// TTL is Member's lease: how long it keeps its demand and its grant
	// without another report, at least 1ms. A member that stops reporting
	// leaves when it ends.
	TTL time.Duration

	// Groups is how many groups share Limit, at most MaxShareMembers, the
	// same in every report on Key (with Floor and Limit; a report that
	// disagrees is refused, ErrShareDisagree). 0 leaves the groups open,
	// and with it the store trusts its own memory: see ShareGrant.Settling.
	Groups int
	// Floor is what every group keeps reserved, 0 to Limit/Groups: a group
	// is never granted less, and the others are never granted it.
	Floor int64
	// Hold is what Member may use until the answer reaches it (its share
	// in force, 0 to MaxRate): the store counts its group for at least that
	// much, so a member that is granted less can take the smaller share
	// after the answer and report again (Hold then the smaller share).
	Hold int64
	// Seq numbers Member's reports, increasing: a report whose Seq is not
	// above the last one the store holds of Member is late and changes
	// nothing (ErrShareLate). 0 leaves the reports unordered.
	Seq int64

	// Window, when above 0, makes Limit the units of one window and
	// numbers that window (a FixedWindow's number): the groups share what
	// is left of it. Used is what Member's group used of the window so far,
	// 0 to Limit, and WindowTTL how long the store keeps the group's use of
	// it, at least TTL and at most 2 × MaxPeriod: past the window's end by
	// the longest a member may still count in it.
	Window    int64
	Used      int64
	WindowTTL time.Duration
}

// ShareGrant is a store's answer to a Share.
type ShareGrant struct {
	// Granted is Member's share now: its group's max-min fair share
	// (Fair), less while the other groups still hold more than theirs, so
	// that the shares held never add up to more than Limit; at least
	// Floor.
	Granted int64
	// Fair is the group's max-min fair share of Limit among the groups'
	// demands (a group asking less than an equal split gets what it asks,
	// and what it leaves is split among the others the same way), plus its
	// part of half the spare: what the shares leave of Limit is halved and
	// split among the groups as headroom, the other half kept for groups
	// that join or grow. With Groups > 0 the split is of what the floors
	// leave, each group's floor added to its part.
	Fair int64
	// Members is how many members hold a grant, Member included.
	Members int
	// At is the store's clock when it answered.
	At time.Time
	// Settling, with Groups > 0, is how long the store still grants no
	// group more than it holds: a store that finds it may have forgotten
	// grants (a restart, a flush, a failover: a key of its own tells it)
	// grants only the floors and what the members say they hold (Hold)
	// until the longest lease it may have granted has ended.
	Settling time.Duration
	// Others are the other groups, as the store holds them.
	Others []ShareHolding
	// Refused, when set, says why nothing was granted or written:
	// ErrShareDisagree, ErrShareStale or ErrShareLate.
	Refused error
}

// ShareHolding is what a store holds of one group sharing a limit.
type ShareHolding struct {
	// Group names the group.
	Group string
	// Members is how many of its members hold a grant.
	Members int
	// Share is what the store counts the group for: the largest share one
	// of its members holds; of a window, at least what it used.
	Share int64
	// Demand is what its members asked, summed; Used what it used of the
	// window.
	Demand, Used int64
	// Left is how long the group's last lease lasts.
	Left time.Duration
}

// The reasons a store refuses a Share (ShareGrant.Refused).
var (
	// ErrShareDisagree: the report's Groups, Floor or Limit differ from
	// those the store holds for Key, or more groups hold a share than
	// Groups says.
	ErrShareDisagree = errors.New("tollgate: share: the report disagrees with the others on the groups, the floor or the limit")
	// ErrShareStale: the report is for a window older than one its member,
	// or another group by more than one window, already reported on.
	ErrShareStale = errors.New("tollgate: share: the report is for a window already past")
	// ErrShareLate: the store holds a report of the member with a Seq at
	// least as high.
	ErrShareLate = errors.New("tollgate: share: the report is older than one the store already holds")
)

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
	case s.Groups < 0 || s.Groups > MaxShareMembers:
		return invalid("share groups must be 0 to MaxShareMembers (%d), got %d", MaxShareMembers, s.Groups)
	case s.Floor < 0 || s.Groups == 0 && s.Floor != 0 || s.Groups > 0 && s.Floor > s.Limit/int64(s.Groups):
		return invalid("share floor must be 0 to Limit/Groups (0 when Groups is 0), got %d of %d among %d", s.Floor, s.Limit, s.Groups)
	case s.Hold < 0 || s.Hold > MaxRate:
		return invalid("share hold must be 0 to MaxRate (10^12), got %d", s.Hold)
	case s.Seq < 0:
		return invalid("share seq must be 0 or more, got %d", s.Seq)
	case s.Window < 0:
		return invalid("share window must be 0 (a rate) or more, got %d", s.Window)
	case s.Window == 0 && (s.Used != 0 || s.WindowTTL != 0):
		return invalid("share used and window TTL are for a window: Window is 0")
	case s.Window > 0 && (s.Used < 0 || s.Used > s.Limit):
		return invalid("share used must be 0 to Limit (%d), got %d", s.Limit, s.Used)
	case s.Window > 0 && (s.WindowTTL < s.TTL || s.WindowTTL > 2*MaxPeriod):
		return invalid("share window TTL must be TTL (%s) to 2×MaxPeriod, got %s", s.TTL, s.WindowTTL)
	}
	if err := validRequestID(s.Member); err != nil {
		return fmt.Errorf("share member, named as a request id: %w", err)
	}
	if err := validRequestID(s.Group); err != nil {
		return fmt.Errorf("share group, named as a request id: %w", err)
	}
	return nil
}
