package store

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lua"
)

// The settle script may not run twice for one call: without a record, a
// copy run twice would apply its settlement twice.
var settleScript = newScript(lua.Settle, sentOnce)

// Settle modes (ARGV[1] of the settle script, lua/doc.go).
const (
	settleNoRecord = 0
	settleRecord   = 1
	settleOverdraw = 2
	// settleRefund settles with records, then deletes the request-id
	// markers of the decide call refunded (refund.go).
	settleRefund = 3
	// settleLook answers as settleNoRecord and writes nothing: Peek's
	// reading of an identity's debt.
	settleLook = 4
	// settleEntryArgs is how many ARGV each entry takes.
	settleEntryArgs = 8
	// settleReplyLen is how many integers the script answers per entry:
	// allowed, remaining, retry, reset, debt, seq, applied.
	settleReplyLen = 7
)

// settleReply is what the settle script answers for one entry
// (lua/doc.go), field by field.
type settleReply [settleReplyLen]int64

const (
	settleAllowed = iota
	settleRemaining
	settleRetryAfter
	settleResetAfter
	settleDebt
	settleSeq     // the sequence the entry's state was written at; 0 when it wrote none with an era
	settleApplied // the units the entry's write debited (below 0: gave back)
)

var _ tollgate.SeatSettler = (*Redis)(nil)

// Settle makes cost the final cost of req, admitted with admitted (see
// tollgate.Settler), with one settle script call. With a RequestID the script
// keeps a record of the cost settled, for the store's replay TTL, so that
// settling the id again applies only the difference.
func (r *Redis) Settle(ctx context.Context, req tollgate.Request, admitted tollgate.Admission, cost int64) (tollgate.Decision, error) {
	ds, err := r.SettleAll(ctx, []tollgate.Request{req}, []tollgate.Admission{admitted}, []int64{cost})
	if err != nil {
		return tollgate.Decision{}, err
	}
	return ds[0], nil
}

// SettleAll settles a set, each request at its own cost (see
// tollgate.Settler): one settle script call on a single node, one per
// Cluster slot on a ClusterClient.
func (r *Redis) SettleAll(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Decision, error) {
	reqs, err := normalizeSettle(reqs, admitted, costs)
	if err != nil {
		return nil, err
	}
	for i, req := range reqs {
		if (req.RequestID == "") != (reqs[0].RequestID == "") {
			return nil, fmt.Errorf("%w: SettleAll request %d: the requests of a set all carry a request id or none do", tollgate.ErrInvalidRequest, i)
		}
	}
	out, err := r.settle(ctx, reqs, r.keys.layOut(reqs, ""), admitted, costs, settleMode(reqs))
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: settle: %w", err)
	}
	return out, nil
}

// overdraw debits reqs (normalized, all Overdraw; laid out as lay) whether
// or not they fit, with the settle script in its overdraw mode.
func (r *Redis) overdraw(ctx context.Context, reqs []tollgate.Request, lay layout) ([]tollgate.Decision, error) {
	costs := make([]int64, len(reqs))
	for i, req := range reqs {
		costs[i] = req.Cost
	}
	out, err := r.settle(ctx, reqs, lay, make([]tollgate.Admission, len(reqs)), costs, settleOverdraw)
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: overdraw: %w", err)
	}
	return out, nil
}

// settleMode is the settle script's mode for settling reqs (normalized, a
// set): with records when they carry a request id.
func settleMode(reqs []tollgate.Request) int64 {
	if reqs[0].RequestID != "" {
		return settleRecord
	}
	return settleNoRecord
}

// settle sends reqs, laid out as lay, to the settle script in mode, one
// call per part, each through its primary's batcher.
func (r *Redis) settle(ctx context.Context, reqs []tollgate.Request, lay layout, admitted []tollgate.Admission, costs []int64, mode int64) ([]tollgate.Decision, error) {
	rec := r.replays.records(mode)
	ps := make([]*settlePart, len(lay.parts))
	for j, part := range lay.parts {
		ps[j] = r.keys.settlePart(reqs, lay.keys, admitted, costs, part, rec)
	}
	out := make([]tollgate.Decision, len(reqs))
	err := r.settleParts(ctx, ps, lay.parts, out)
	if r.deny != nil && mode != settleLook {
		for _, req := range reqs {
			r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm)) // the state changed
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
