package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/lua"
)

// The seat script is idempotent per seat id (an id holds one seat; a
// release of a seat not held is nothing), but it answers what it found, so
// it is sent once like every script call and a lost reply is an error.
var seatScript = newScript(lua.Seat, sentOnce)

// Seat script operations (lua/doc.go).
const (
	seatAcquire = "acquire"
	seatRenew   = "renew"
	seatRelease = "release"
	seatCount   = "count"
	// seatRestore restores a seat after a failover: held until an instant,
	// whatever the limit.
	seatRestore = "hold"
)

// seatHoldTTL is how long the mean hold time of an identity's seats is kept
// after its last release.
const seatHoldTTL = 10 * time.Minute

// seatReply is what the seat script answers to acquire and renew
// (lua/doc.go), field by field.
type seatReply [6]int64

const (
	seatAllowed    = iota // 1 held, 0 not
	seatHeld              // seats held after the operation
	seatReused            // 1 when the id held one already
	seatRetryAfter        // µs until the first held seat expires (a denied acquire)
	seatNow               // the server time, µs
	seatHold              // µs, the mean hold time (a denied acquire)
)

// AcquireSeat takes a seat of s.Key, or renews s.ID's (see
// tollgate.SeatStore), with one seat script call on the identity's hash
// tag: the expired seats are dropped first, by the server's clock.
func (r *Redis) AcquireSeat(ctx context.Context, s tollgate.Seat) (tollgate.SeatDecision, error) {
	g, err := r.seatCall(ctx, s, seatAcquire)
	if err != nil {
		return tollgate.SeatDecision{}, err
	}
	return tollgate.SeatDecision{Allowed: g[seatAllowed] == 1, InUse: g[seatHeld], Reused: g[seatReused] == 1,
		RetryAfter: micros(g[seatRetryAfter]), Hold: micros(g[seatHold])}, nil
}

// RenewSeat moves s.ID's seat expiry to s.TTL from now (see
// tollgate.SeatStore).
func (r *Redis) RenewSeat(ctx context.Context, s tollgate.Seat) (bool, error) {
	g, err := r.seatCall(ctx, s, seatRenew)
	if err != nil {
		return false, err
	}
	return g[seatAllowed] == 1, nil
}

// ReleaseSeat frees s.ID's seat (see tollgate.SeatStore).
func (r *Redis) ReleaseSeat(ctx context.Context, s tollgate.Seat) error {
	if err := check.RequestID(s.ID); err != nil {
		return err
	}
	s.Max, s.TTL = 1, max(s.Hold, 0) // ARGV[4] of a release: the time held
	_, err := r.seatCall(ctx, s, seatRelease)
	return err
}

// SeatsInUse reports how many seats of key are held now.
func (r *Redis) SeatsInUse(ctx context.Context, key string) (int64, error) {
	g, err := askAgain(ctx, func() (seatReply, error) {
		return r.seatCall(ctx, tollgate.Seat{Key: key, Max: 1, ID: "-", TTL: 1}, seatCount)
	})
	if err != nil {
		return 0, err
	}
	return g[0], nil
}

// seatPart is what makes a call a seat call: its arguments as sent alone
// (EVALSHA sha 2 seats hold era holdTTL op max id ttl, lua/doc.go), its
// operation, and once answered, the reply.
type seatPart struct {
	args  []any
	op    string
	reply seatReply
}

// seatCall runs op of the seat script for s and returns its reply. It goes
// through the batcher, as a decision does: concurrent seat calls share
// round trips and, folded, script calls (fold.go).
func (r *Redis) seatCall(ctx context.Context, s tollgate.Seat, op string) (seatReply, error) {
	if op == seatAcquire || op == seatRenew {
		if err := s.Validate(); err != nil {
			return seatReply{}, err
		}
	} else if len(s.Key) > tollgate.MaxKeyLen {
		return seatReply{}, fmt.Errorf("%w: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, len(s.Key), tollgate.MaxKeyLen)
	}
	prefix := r.keys.of(s.Key)
	c := calls.Get().(*call)
	c.entries, c.admit, c.settle, c.finish, c.err, c.now, c.era = 0, nil, nil, nil, nil, 0, ""
	c.keys = c.keyBuf[:2]
	c.keys[0], c.keys[1] = keyOf(prefix, seatsCode, s.Key), keyOf(prefix, holdCode, s.Key)
	c.seat = &seatPart{op: op, args: []any{nil, nil, int64(2), &c.keys[0], &c.keys[1],
		eraNone, seatHoldTTL.Milliseconds(), op, s.Max, s.ID, s.TTL.Microseconds()}}
	c.deadline, _ = ctx.Deadline()
	if err := r.send(ctx, c); err != nil {
		// c stays with the abandoned call: its keys are the arguments.
		return seatReply{}, fmt.Errorf("tollgate: redis store: seat: %w", err)
	}
	g, err := c.seat.reply, c.err
	c.seat = nil
	calls.Put(c)
	if err != nil {
		return seatReply{}, fmt.Errorf("tollgate: redis store: seat: %w", err)
	}
	return g, nil
}
