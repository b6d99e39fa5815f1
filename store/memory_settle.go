package store

import (
	"context"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

var _ tollgate.SeatSettler = (*Memory)(nil)

// Settle makes cost the final cost of req, admitted with admitted (see
// tollgate.Settler): lua/settle.lua's arithmetic (internal/algo's Settle),
// with the same answers.
func (m *Memory) Settle(ctx context.Context, req tollgate.Request, admitted tollgate.Admission, cost int64) (tollgate.Decision, error) {
	ds, err := m.SettleAll(ctx, []tollgate.Request{req}, []tollgate.Admission{admitted}, []int64{cost})
	if err != nil {
		return tollgate.Decision{}, err
	}
	return ds[0], nil
}

// SettleAll settles a set, each request at its own final cost, in one step
// (see tollgate.Settler).
func (m *Memory) SettleAll(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	reqs, err := normalizeSettle(reqs, admitted, costs)
	if err != nil {
		return nil, err
	}
	now := m.clock().UnixMicro()
	set := make([]member, len(reqs))
	for i, req := range reqs {
		set[i].sh, set[i].shard, set[i].state = m.locate(req)
		set[i].p = algo.ParamsOf(req)
	}
	m.lock(set)
	defer m.unlock(set)
	out := make([]tollgate.Decision, len(reqs))
	recordTTL := m.replays.ttlMs() * 1000
	for i, req := range reqs {
		mb := &set[i]
		mb.sh.reclaim(now)
		adm := admissionOf(req, admitted[i])
		var rec memKey
		if req.RequestID != "" {
			rec = mb.state.settleRecord(req.RequestID)
			if e := mb.sh.live(rec, now); e != nil {
				adm.Settled = e.count
			}
		}
		st, w, r := algo.Settle(req.Limit.Algorithm, m.current(set, i, now), now, mb.p, adm, costs[i])
		m.write(mb, st, w, now, r.TTL)
		if req.RequestID != "" {
			e := mb.sh.upsert(rec, now)
			e.count = costs[i]
			mb.sh.setExpiry(e, now+recordTTL)
		}
		out[i] = decisionOf(r, now)
	}
	return out, nil
}

// overdraw debits every request of the set (normalized, all Overdraw)
// whether or not it fits, in order: internal/algo's Overdraw.
func (m *Memory) overdraw(reqs []tollgate.Request, set []member) {
	now := m.clock().UnixMicro()
	for i, req := range reqs {
		set[i].sh, set[i].shard, set[i].state = m.locate(req)
		set[i].p = algo.ParamsOf(req)
	}
	m.lock(set)
	defer m.unlock(set)
	for i, req := range reqs {
		mb := &set[i]
		mb.sh.reclaim(now)
		st, w, r := algo.Overdraw(req.Limit.Algorithm, m.current(set, i, now), now, mb.p)
		m.write(mb, st, w, now, r.TTL)
		mb.d = decisionOf(r, now)
	}
}

// current returns set[i]'s state at now: what an earlier member on the
// same state left, or the stored one.
func (m *Memory) current(set []member, i int, now int64) algo.State {
	if j := earlier(set, i); j >= 0 {
		return set[j].after
	}
	return set[i].sh.state(set[i].state, now)
}

// write applies a settlement's or an overdraw's write to mb's state, and
// keeps the state for the members after it.
func (m *Memory) write(mb *member, st algo.State, w algo.Write, now, ttl int64) {
	switch w {
	case algo.Put:
		mb.sh.put(mb.state, st, now, ttl)
		mb.after = st
	case algo.Delete:
		mb.sh.remove(mb.state)
		mb.after = algo.State{}
	default:
		mb.after = mb.sh.state(mb.state, now)
	}
}

// admissionOf is the admission req's Settle changes: what admitted
// debited, when, and how far from full it left the bucket. A zero admitted
// (a refund nobody kept the admission of) counts as debited now from an
// empty bucket.
func admissionOf(req tollgate.Request, admitted tollgate.Admission) algo.Admission {
	adm := algo.Admission{Reserved: req.Cost, Reset: admitted.ResetAfter.Microseconds(), Settled: -1}
	if !admitted.At.IsZero() {
		adm.At = admitted.At.UnixMicro()
	}
	return adm
}
