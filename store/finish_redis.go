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
	if !r.oneSlot(reqs, release) {
		return settleThenRelease(ctx, r, reqs, admitted, costs, release)
	}
	all := make([]int, len(reqs))
	for i := range all {
		all[i] = i
	}
	args, nkeys := []any{nil, nil, 0, eraNone}, 0 // nothing to settle: the era alone
	if len(reqs) > 0 {
		args = r.settleArgs(reqs, admitted, costs, all, settleMode(reqs, false))
		nkeys = args[2].(int)
	}
	out := make([]any, 0, len(args)+4*len(release)+2)
	out = append(out, nil, nil, nkeys+2*len(release))
	out = append(out, args[3:3+nkeys]...)
	for _, s := range release {
		prefix := r.keyPrefix(s.Key)
		out = append(out, keyOf(prefix, seatsCode, s.Key), keyOf(prefix, holdCode, s.Key))
	}
	out = append(out, args[3+nkeys:]...)
	for _, s := range release {
		out = append(out, s.ID, max(s.Hold, 0).Microseconds())
	}
	out = append(out, seatHoldTTL.Milliseconds(), len(release))
	sc := [1]scriptCall{{script: finishScript, args: out}}
	err := r.exchange(ctx, sc[:])
	if err == nil {
		r.journalFinish(sc[0], nkeys, len(release))
	}
	ds := make([]tollgate.Decision, len(reqs))
	if err == nil && len(reqs) > 0 {
		err = readSettle(sc[0].cmd, all, ds)
	} else if err == nil {
		_, err = sc[0].cmd.(scriptCmd).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: finish: %w", err)
	}
	if r.deny != nil {
		for _, req := range reqs {
			r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm))
		}
	}
	return ds, nil
}

// oneSlot reports whether every key of reqs and release can go in one
// script call: on a single node (or through Sentinel) always, on a Cluster
// when they share one slot.
func (r *Redis) oneSlot(reqs []tollgate.Request, release []tollgate.Seat) bool {
	if r.cluster == nil {
		_, single := r.client.(*redis.Client)
		return single
	}
	want := -1
	same := func(k string) bool {
		s := slot(k)
		if want < 0 {
			want = s
		}
		return s == want
	}
	for _, req := range reqs {
		if !same(decisionKeys(r.keyPrefix(req.Key), req.Limit.Algorithm, req.Key, "")[0]) {
			return false
		}
	}
	for _, s := range release {
		if !same(keyOf(r.keyPrefix(s.Key), seatsCode, s.Key)) {
			return false
		}
	}
	return true
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
