package lease

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate"
)

// Settle settles req on the inner store: a lease's units were debited
// there, so the difference is given back or debited there too (see
// tollgate.Settler). A decision admitted from a lease has no store time;
// the inner store counts it as made now.
func (s *Store) Settle(ctx context.Context, req tollgate.Request, admitted tollgate.Admission, cost int64) (tollgate.Decision, error) {
	if in, ok := s.inner.(tollgate.Settler); ok {
		return in.Settle(ctx, req, admitted, cost)
	}
	return tollgate.Decision{}, errNoSettle
}

// SettleAll settles a set on the inner store (see tollgate.Settler).
func (s *Store) SettleAll(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Decision, error) {
	if in, ok := s.inner.(tollgate.Settler); ok {
		return in.SettleAll(ctx, reqs, admitted, costs)
	}
	return nil, errNoSettle
}

// errNoSettle, errNoSeats and errNoOverrides are the errors of an inner
// store that does not settle, keep seats or keep overrides.
var (
	errNoSettle    = errors.New("lease: the inner store does not settle (tollgate.Settler)")
	errNoSeats     = errors.New("lease: the inner store does not bound calls in flight (tollgate.SeatStore)")
	errNoOverrides = errors.New("lease: the inner store does not keep overrides (tollgate.OverrideStore)")
)

// AcquireSeat, RenewSeat, ReleaseSeat and SeatsInUse are the inner store's
// (tollgate.SeatStore): seats are never leased.
func (s *Store) AcquireSeat(ctx context.Context, sl tollgate.Seat) (tollgate.SeatDecision, error) {
	if in, ok := s.inner.(tollgate.SeatStore); ok {
		return in.AcquireSeat(ctx, sl)
	}
	return tollgate.SeatDecision{}, errNoSeats
}

// RenewSeat is the inner store's.
func (s *Store) RenewSeat(ctx context.Context, sl tollgate.Seat) (bool, error) {
	if in, ok := s.inner.(tollgate.SeatStore); ok {
		return in.RenewSeat(ctx, sl)
	}
	return false, errNoSeats
}

// ReleaseSeat is the inner store's.
func (s *Store) ReleaseSeat(ctx context.Context, sl tollgate.Seat) error {
	if in, ok := s.inner.(tollgate.SeatStore); ok {
		return in.ReleaseSeat(ctx, sl)
	}
	return errNoSeats
}

// SeatsInUse is the inner store's.
func (s *Store) SeatsInUse(ctx context.Context, key string) (int64, error) {
	if in, ok := s.inner.(tollgate.SeatStore); ok {
		return in.SeatsInUse(ctx, key)
	}
	return 0, errNoSeats
}

// SetOverride, DeleteOverride, Overrides and OverridesVersion are the
// inner store's (tollgate.OverrideStore).
func (s *Store) SetOverride(ctx context.Context, scope string, o tollgate.Override, ttl time.Duration) error {
	if in, ok := s.inner.(tollgate.OverrideStore); ok {
		return in.SetOverride(ctx, scope, o, ttl)
	}
	return errNoOverrides
}

// DeleteOverride is the inner store's.
func (s *Store) DeleteOverride(ctx context.Context, scope, key string) error {
	if in, ok := s.inner.(tollgate.OverrideStore); ok {
		return in.DeleteOverride(ctx, scope, key)
	}
	return errNoOverrides
}

// Overrides is the inner store's.
func (s *Store) Overrides(ctx context.Context, scope string) ([]tollgate.Override, error) {
	if in, ok := s.inner.(tollgate.OverrideStore); ok {
		return in.Overrides(ctx, scope)
	}
	return nil, errNoOverrides
}

// OverridesVersion is the inner store's.
func (s *Store) OverridesVersion(ctx context.Context) (int64, error) {
	if in, ok := s.inner.(tollgate.OverrideStore); ok {
		return in.OverridesVersion(ctx)
	}
	return 0, errNoOverrides
}

// WatchOverrides is the inner store's watch (tollgate.OverrideWatcher);
// over an inner store without one it watches nothing, and a limiter finds
// changes by their version.
func (s *Store) WatchOverrides(changed func()) (stop func()) {
	if in, ok := s.inner.(tollgate.OverrideWatcher); ok {
		return in.WatchOverrides(changed)
	}
	return func() {}
}

// DecidesInProcess reports whether the inner store decides in process
// (tollgate.InProcess): a lease is taken from it, so the tier waits on it
// for nothing more.
func (s *Store) DecidesInProcess() bool {
	in, ok := s.inner.(tollgate.InProcess)
	return ok && in.DecidesInProcess()
}
