package store

import (
	"context"
	"sync"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
)

// memSeats holds a Memory store's in-flight seats: for each key, the ids
// holding a seat and when each expires (µs on the store's clock). A key is
// dropped once none of its seats is held, so memory follows the calls in
// flight.
type memSeats struct {
	mu    sync.Mutex
	byKey map[string]map[string]int64
	// sweepAt is the number of keys at which every key is swept of its
	// expired seats; it doubles with what is left.
	sweepAt int
	// holds is each key's mean hold time (as the seat script keeps it),
	// until it expires; swept likewise at holdSweepAt keys.
	holds       map[string]memHold
	holdSweepAt int
}

// memHold is a key's mean hold time in µs and when it expires.
type memHold struct{ mean, expires int64 }

// hold returns key's mean hold time at now, 0 when unknown.
func (ms *memSeats) hold(key string, now int64) int64 {
	if h, ok := ms.holds[key]; ok && now < h.expires {
		return h.mean
	}
	return 0
}

// held folds a seat of key held for us (> 0) into its mean at now, as the
// seat script does.
func (ms *memSeats) held(key string, us, now int64) {
	mean := us
	if h, ok := ms.holds[key]; ok && now < h.expires {
		mean = h.mean - h.mean/8 + us/8
	}
	if len(ms.holds) >= ms.holdSweepAt {
		for k, h := range ms.holds {
			if h.expires <= now {
				delete(ms.holds, k)
			}
		}
		ms.holdSweepAt = max(2*len(ms.holds), 1024)
	}
	if ms.holds == nil {
		ms.holds = make(map[string]memHold)
	}
	ms.holds[key] = memHold{mean: mean, expires: now + seatHoldTTL.Microseconds()}
}

// live drops the expired seats of key at now and returns its seats, nil
// when none is held.
func (ms *memSeats) live(key string, now int64) map[string]int64 {
	held := ms.byKey[key]
	for id, exp := range held {
		if exp <= now {
			delete(held, id)
		}
	}
	if len(held) == 0 {
		delete(ms.byKey, key)
		return nil
	}
	return held
}

// sweep drops every expired seat once the keys have doubled since the last
// sweep, so that keys whose calls died do not pile up.
func (ms *memSeats) sweep(now int64) {
	if len(ms.byKey) < ms.sweepAt {
		return
	}
	for key := range ms.byKey {
		ms.live(key, now)
	}
	ms.sweepAt = max(2*len(ms.byKey), 1024)
}

// AcquireSeat takes a seat of s.Key (see tollgate.SeatStore).
func (m *Memory) AcquireSeat(ctx context.Context, s tollgate.Seat) (tollgate.SeatDecision, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.SeatDecision{}, err
	}
	if err := s.Validate(); err != nil {
		return tollgate.SeatDecision{}, err
	}
	now := m.clock().UnixMicro()
	ms := &m.seats
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.sweep(now)
	held := ms.live(s.Key, now)
	exp := now + s.TTL.Microseconds()
	if _, ok := held[s.ID]; ok {
		held[s.ID] = exp
		return tollgate.SeatDecision{Allowed: true, InUse: int64(len(held)), Reused: true}, nil
	}
	if int64(len(held)) >= s.Max {
		first := int64(-1)
		for _, e := range held {
			if first < 0 || e < first {
				first = e
			}
		}
		return tollgate.SeatDecision{InUse: int64(len(held)), RetryAfter: micros(first - now), Hold: micros(ms.hold(s.Key, now))}, nil
	}
	if held == nil {
		if ms.byKey == nil {
			ms.byKey = make(map[string]map[string]int64)
		}
		held = make(map[string]int64)
		ms.byKey[s.Key] = held
	}
	held[s.ID] = exp
	return tollgate.SeatDecision{Allowed: true, InUse: int64(len(held))}, nil
}

// RenewSeat moves s.ID's seat expiry to s.TTL from now (see
// tollgate.SeatStore).
func (m *Memory) RenewSeat(ctx context.Context, s tollgate.Seat) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := s.Validate(); err != nil {
		return false, err
	}
	now := m.clock().UnixMicro()
	ms := &m.seats
	ms.mu.Lock()
	defer ms.mu.Unlock()
	held := ms.live(s.Key, now)
	if _, ok := held[s.ID]; !ok {
		return false, nil
	}
	held[s.ID] = now + s.TTL.Microseconds()
	return true, nil
}

// ReleaseSeat frees s.ID's seat (see tollgate.SeatStore).
func (m *Memory) ReleaseSeat(ctx context.Context, s tollgate.Seat) error {
	if err := checkKey(ctx, s.Key); err != nil {
		return err
	}
	if err := check.RequestID(s.ID); err != nil {
		return err
	}
	ms := &m.seats
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if us := s.Hold.Microseconds(); us > 0 {
		ms.held(s.Key, us, m.clock().UnixMicro())
	}
	if held := ms.byKey[s.Key]; held != nil {
		delete(held, s.ID)
		if len(held) == 0 {
			delete(ms.byKey, s.Key)
		}
	}
	return nil
}

// SeatsInUse reports how many seats of key are held now.
func (m *Memory) SeatsInUse(ctx context.Context, key string) (int64, error) {
	if err := checkKey(ctx, key); err != nil {
		return 0, err
	}
	now := m.clock().UnixMicro()
	ms := &m.seats
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return int64(len(ms.live(key, now))), nil
}

// AllowAllWithSeat takes s and decides reqs, all or nothing (see
// tollgate.SeatAllower): the seat first, then AllowAll, the seat given
// back when the set is denied.
func (m *Memory) AllowAllWithSeat(ctx context.Context, s tollgate.Seat, reqs []tollgate.Request) (tollgate.SeatDecision, []tollgate.Decision, error) {
	return allowWithSeat(ctx, m, s, reqs)
}

// SettleAllAndRelease settles reqs as SettleAll does and then releases
// the seats of release (see tollgate.SeatSettler).
func (m *Memory) SettleAllAndRelease(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, release []tollgate.Seat) ([]tollgate.Decision, error) {
	return settleThenRelease(ctx, m, reqs, admitted, costs, release)
}
