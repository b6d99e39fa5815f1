package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lua"
)

// The admit script debits and takes a seat: sent once, like a decision.
var admitScript = newScript(lua.Admit, sentOnce)

// admitPart is what makes a call an admit call: its arguments and its
// seat, and once answered, the seat's answer and whether the entries were
// judged.
type admitPart struct {
	args    []any
	seat    tollgate.Seat
	seatKey [2]string // the identity's seats and hold-time keys
	answer  tollgate.SeatDecision
	judged  bool
}

// Admit seat answers (the first integer of its reply, lua/doc.go).
const (
	admitDenied = 0 // no seat free: nothing judged
	admitTaken  = 1 // the seat is held, every entry admitted
	admitFree   = 2 // a seat was free, not taken: an entry denied
)

// AllowAllWithSeat takes s and decides reqs, all or nothing (see
// tollgate.SeatAllower): one admit script call when the seat's key and
// every request's are on one Cluster slot (always on a single node or
// through Sentinel), otherwise a seat call and then AllowAll, the seat
// given back when the set is denied.
func (r *Redis) AllowAllWithSeat(ctx context.Context, s tollgate.Seat, reqs []tollgate.Request) (tollgate.SeatDecision, []tollgate.Decision, error) {
	if err := s.Validate(); err != nil {
		return tollgate.SeatDecision{}, nil, err
	}
	reqs, err := normalizeAll(reqs)
	if err != nil {
		return tollgate.SeatDecision{}, nil, err
	}
	for _, req := range reqs {
		r.persistence.note(req.Limit, &r.road)
	}
	prefix := r.keys.of(s.Key)
	seatKey := keyOf(prefix, seatsCode, s.Key)
	if reqs[0].Overdraw {
		return allowWithSeat(ctx, r, s, reqs)
	}
	mode := r.replays.modeFor(reqs[0].RequestID, setReplayTTL(reqs))
	lay := r.keys.layOut(reqs, mode.markerID())
	if len(lay.parts) > 1 || !r.keys.sameSlot(seatKey, lay.keys[0]) {
		return allowWithSeat(ctx, r, s, reqs)
	}
	c := r.keys.newCall(ctx, reqs, lay.keys, mode)
	nkeys := len(c.keys) + 1 // and the lineage key
	args := make([]any, 0, len(c.args)+5)
	args = append(args, nil, nil, int64(nkeys+2))
	args = append(args, c.args[3:3+nkeys]...)
	args = append(args, seatKey, keyOf(prefix, holdCode, s.Key))
	args = append(args, c.args[3+nkeys:]...)
	args = append(args, s.Max, s.ID, s.TTL.Microseconds())
	c.admit = &admitPart{args: args, seat: s, seatKey: [2]string{seatKey, keyOf(prefix, holdCode, s.Key)}}
	// Through the batcher, as a decision goes: concurrent admit calls
	// share round trips, each still a script call of its own (an admit's
	// cost is its script's body, which folding several into one call did
	// not cut: docs/performance.md).
	if err := r.send(ctx, c); err != nil {
		// c stays with the abandoned call: its keys are the arguments.
		return tollgate.SeatDecision{}, nil, fmt.Errorf("tollgate: redis store: admit: %w", err)
	}
	sd, err := c.admit.answer, c.err
	var out []tollgate.Decision
	if err == nil && c.admit.judged {
		out = append(out, c.decisions...) // c's own array goes back to the pool
	}
	calls.Put(c)
	if err != nil {
		return tollgate.SeatDecision{}, nil, fmt.Errorf("tollgate: redis store: admit: %w", err)
	}
	if r.deny != nil && sd.Allowed {
		for _, req := range reqs {
			r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm))
		}
	}
	return sd, out, nil
}

// decodeAdmit decodes an admit script call's answer at the head of v
// (lua/doc.go) for entries entries: the seat's answer (Allowed: taken) and, unless no
// seat was free (nil), the decisions, with each entry's sequence in seqs;
// and how many integers it took.
func decodeAdmit(v []int64, entries int, seqs []int64) (tollgate.SeatDecision, []tollgate.Decision, int, error) {
	if len(v) < len(seatReply{}) {
		return tollgate.SeatDecision{}, nil, 0, errBadReply
	}
	var g seatReply
	copy(g[:], v)
	sd := tollgate.SeatDecision{InUse: g[seatHeld], Reused: g[seatReused] == 1, RetryAfter: micros(g[seatRetryAfter]), Hold: micros(g[seatHold])}
	switch g[seatAllowed] {
	case admitDenied:
		return sd, nil, len(g), nil
	case admitTaken:
		sd.Allowed = true
	case admitFree:
	default:
		return tollgate.SeatDecision{}, nil, 0, errBadReply
	}
	n := len(g) + entryReplyLen*entries + 1
	if len(v) < n {
		return tollgate.SeatDecision{}, nil, 0, errBadReply
	}
	d := v[len(g):n]
	at := time.UnixMicro(d[len(d)-1])
	out := make([]tollgate.Decision, entries)
	for i := range out {
		g := entryReply(d[entryReplyLen*i:])
		out[i], seqs[i] = g.decision(), g[replySeq]
		out[i].At = at
	}
	return sd, out, n, nil
}

// allowWithSeat takes s on st and then decides reqs with AllowAll,
// giving a seat it took back when the set is denied: AllowAllWithSeat in
// two steps, for stores (and Cluster layouts) that cannot take both in one.
func allowWithSeat(ctx context.Context, st tollgate.SeatStore, s tollgate.Seat, reqs []tollgate.Request) (tollgate.SeatDecision, []tollgate.Decision, error) {
	sd, err := st.AcquireSeat(ctx, s)
	if err != nil || !sd.Allowed {
		return sd, nil, err
	}
	ds, err := st.AllowAll(ctx, reqs)
	admitted := err == nil
	for _, d := range ds {
		admitted = admitted && d.Allowed
	}
	if !admitted {
		sd.Allowed = false
		if rerr := st.ReleaseSeat(context.WithoutCancel(ctx), s); err == nil {
			err = rerr
		}
	}
	return sd, ds, err
}
