package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/lua"
)

// The finish script settles and releases: sent once, like a settlement.
var finishScript = newScript(lua.Finish, sentOnce)

// SettleAllAndRelease settles reqs as SettleAll does (none: nothing to
// settle) and then releases the seats of release (see
// tollgate.SeatSettler): one finish script call on a single node, through
// Sentinel, or when every key is on one Cluster slot; otherwise SettleAll
// and then a seat call per release.
func (r *Redis) SettleAllAndRelease(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, release []tollgate.Seat) ([]tollgate.Decision, error) {
	for i, s := range release {
		if err := check.RequestID(s.ID); err != nil {
			return nil, fmt.Errorf("release %d: %w", i, err)
		}
		if len(s.Key) > tollgate.MaxKeyLen {
			return nil, fmt.Errorf("%w: release %d: key is %d bytes, more than %d", tollgate.ErrInvalidRequest, i, len(s.Key), tollgate.MaxKeyLen)
		}
	}
	if len(reqs) > 0 {
		var err error
		if reqs, err = normalizeSettle(reqs, admitted, costs); err != nil {
			return nil, err
		}
		for i, req := range reqs {
			if (req.RequestID == "") != (reqs[0].RequestID == "") {
				return nil, fmt.Errorf("%w: SettleAllAndRelease request %d: the requests of a set all carry a request id or none do", tollgate.ErrInvalidRequest, i)
			}
		}
	}
	if len(reqs) == 0 && len(release) == 0 {
		return []tollgate.Decision{}, nil
	}
	states := r.keys.setKeys(reqs, "")
	if !r.keys.oneSlot(states, release) {
		return settleThenRelease(ctx, r, reqs, admitted, costs, release)
	}
	all := make([]int, len(reqs))
	for i := range all {
		all[i] = i
	}
	f := &finishPart{}
	if len(reqs) > 0 {
		f.settle = r.keys.settlePart(reqs, states, admitted, costs, all, r.replays.records(settleMode(reqs)))
	}
	for _, s := range release {
		prefix := r.keys.of(s.Key)
		f.seats = append(f.seats, [2]string{keyOf(prefix, seatsCode, s.Key), keyOf(prefix, holdCode, s.Key)})
		f.ids = append(f.ids, s.ID)
		f.held = append(f.held, max(s.Hold, 0).Microseconds())
	}
	// Through the batcher, as every debit goes: a finish call shares round
	// trips with the others, a script call of its own.
	c := finishCall(ctx, f)
	if err := r.send(ctx, c); err != nil {
		return nil, fmt.Errorf("tollgate: redis store: finish: %w", err) // c is abandoned to its runner
	}
	err := c.err
	c.finish = nil
	calls.Put(c)
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: finish: %w", err)
	}
	ds := make([]tollgate.Decision, len(reqs))
	if f.settle != nil {
		f.settle.decisions(all, ds)
	}
	if r.deny != nil {
		for _, req := range reqs {
			r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm))
		}
	}
	return ds, nil
}

// settleThenRelease is SettleAllAndRelease in steps, for stores (and
// Cluster layouts) that cannot take both in one: SettleAll, then each
// release, stopping at the first error.
func settleThenRelease(ctx context.Context, st tollgate.SeatSettler, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, release []tollgate.Seat) ([]tollgate.Decision, error) {
	var ds []tollgate.Decision
	if len(reqs) > 0 {
		var err error
		if ds, err = st.SettleAll(ctx, reqs, admitted, costs); err != nil {
			return nil, err
		}
	}
	for _, s := range release {
		if err := st.ReleaseSeat(ctx, s); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// finishPart is what makes a call a finish call: the settle part it
// settles (nil: none) and the seats it releases, each's keys (seats, hold
// time), id and hold time in µs.
type finishPart struct {
	settle *settlePart
	seats  [][2]string
	ids    []string
	held   []int64
	now    int64 // the server time of the reply, µs
}

// args lays out the finish script call (lua/doc.go, Finish): the settle
// call's KEYS, the seats' keys, the settle call's ARGV (the era alone
// without one), each seat's id and hold time, the hold time's TTL, the
// number of seats.
func (f *finishPart) args() []any {
	var settle []any
	nkeys := 0
	if f.settle != nil {
		settle = settleArgs([]*settlePart{f.settle})
		nkeys = int(settle[2].(int64))
	} else {
		settle = []any{nil, nil, int64(0), eraNone}
	}
	out := make([]any, 0, len(settle)+4*len(f.seats)+2)
	out = append(out, nil, nil, int64(nkeys+2*len(f.seats)))
	out = append(out, settle[3:3+nkeys]...)
	for _, k := range f.seats {
		out = append(out, k[0], k[1])
	}
	out = append(out, settle[3+nkeys:]...)
	for i, id := range f.ids {
		out = append(out, id, f.held[i])
	}
	return append(out, seatHoldTTL.Milliseconds(), int64(len(f.seats)))
}

// read records the finish script's reply: the settle call's, or {now_us}.
func (f *finishPart) read(cmd redis.Cmder) error {
	if f.settle != nil {
		err := readSettles(cmd, []*settlePart{f.settle})
		f.now = f.settle.now
		return err
	}
	v, err := cmd.(scriptCmd).Result()
	if err == nil && len(v) != 1 {
		err = errBadReply
	}
	if err == nil {
		f.now = v[0]
	}
	return err
}

// finishCall returns a call carrying f, to send through the batcher.
func finishCall(ctx context.Context, f *finishPart) *call {
	c := calls.Get().(*call)
	c.entries, c.mode, c.admit, c.seat, c.settle, c.finish = 0, decideMode{}, nil, nil, nil, f
	c.keys = c.keyBuf[:1]
	switch {
	case f.settle != nil:
		c.keys[0] = f.settle.states[0]
	case len(f.seats) > 0:
		c.keys[0] = f.seats[0][0]
	}
	c.now, c.err, c.era = 0, nil, ""
	c.deadline, _ = ctx.Deadline()
	return c
}
