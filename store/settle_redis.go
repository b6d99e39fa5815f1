package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
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
	// settleArgs is how many ARGV each entry takes.
	settleArgs = 8
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

// readSettle decodes a settle script call's reply (lua/doc.go), whose
// entries are the requests part names, into out.
func readSettle(cmd redis.Cmder, part []int, out []tollgate.Decision) error {
	v, err := cmd.(scriptCmd).Result()
	if err == nil && len(v) != settleReplyLen*len(part)+1 {
		err = errBadReply
	}
	if err != nil {
		return err
	}
	now := time.UnixMicro(v[len(v)-1])
	for k, i := range part {
		g := settleReply(v[settleReplyLen*k:])
		out[i] = tollgate.Decision{
			Allowed: g[settleAllowed] == 1, Remaining: g[settleRemaining], RetryAfter: micros(g[settleRetryAfter]),
			ResetAfter: micros(g[settleResetAfter]), Debt: g[settleDebt], At: now,
		}
	}
	return nil
}

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
	out, err := r.settle(ctx, reqs, admitted, costs, settleMode(reqs, false))
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: settle: %w", err)
	}
	return out, nil
}

// overdraw debits reqs (normalized, all Overdraw) whether or not they fit,
// with the settle script in its overdraw mode.
func (r *Redis) overdraw(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	costs := make([]int64, len(reqs))
	for i, req := range reqs {
		costs[i] = req.Cost
	}
	out, err := r.settle(ctx, reqs, make([]tollgate.Admission, len(reqs)), costs, settleMode(reqs, true))
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: overdraw: %w", err)
	}
	return out, nil
}

// settleMode is the settle script's mode for reqs (normalized, a set).
func settleMode(reqs []tollgate.Request, overdraw bool) int64 {
	switch {
	case overdraw:
		return settleOverdraw
	case reqs[0].RequestID != "":
		return settleRecord
	}
	return settleNoRecord
}

// settleArgs lays out a settle script call (EVALSHA sha numkeys KEYS...
// ARGV...) of the requests part names, in mode, with each record (mode
// settleRecord) under its request's id for the store's replay TTL.
func (r *Redis) settleArgs(reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, part []int, mode int64) []any {
	ttl := int64(0)
	if mode == settleRecord {
		ttl = r.replays.ttlMs()
	}
	return r.settleLayout(reqs, admitted, costs, part, settleRecords{mode: mode, ttlMs: ttl})
}

// settleRecords says how a settle call records what it settled: its mode;
// in the modes with records, their TTL and, when id is set, the one id
// every entry's record is named by (else each request's RequestID); in
// settleRefund, the markers to delete, one per entry.
type settleRecords struct {
	mode    int64
	ttlMs   int64
	id      string
	markers []string
}

// settleLayout lays out a settle script call of the requests part names
// (see settleArgs) as rec says.
func (r *Redis) settleLayout(reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, part []int, rec settleRecords) []any {
	records := rec.mode == settleRecord || rec.mode == settleRefund
	nkeys := len(part)
	if records {
		nkeys *= 2
	}
	nkeys += len(rec.markers)
	args := make([]any, 3, 3+nkeys+3+settleArgs*len(part))
	args[2] = nkeys
	keys := make([]string, 0, nkeys)
	for _, i := range part {
		keys = append(keys, decisionKeys(r.keyPrefix(reqs[i].Key), reqs[i].Limit.Algorithm, reqs[i].Key, "")[0])
	}
	if records {
		for k, i := range part {
			id := rec.id
			if id == "" {
				id = reqs[i].RequestID
			}
			keys = append(keys, recordKey(keys[k], id))
		}
	}
	keys = append(keys, rec.markers...)
	for _, k := range keys {
		args = append(args, k)
	}
	ttl := int64(0)
	if records {
		ttl = rec.ttlMs
	}
	args = append(args, eraNone, rec.mode, ttl)
	for _, i := range part {
		p := algo.ParamsOf(reqs[i])
		final, at := costs[i], int64(0)
		if !admitted[i].At.IsZero() {
			at = admitted[i].At.UnixMicro()
		}
		args = append(args, int64(reqs[i].Limit.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost, final, at, admitted[i].ResetAfter.Microseconds())
	}
	return args
}

// settle sends reqs to the settle script in mode, one call per part (see
// partition), in one pipeline.
func (r *Redis) settle(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, mode int64) ([]tollgate.Decision, error) {
	parts := r.partition(reqs)
	sc := make([]scriptCall, len(parts))
	for j, part := range parts {
		sc[j] = scriptCall{script: settleScript, args: r.settleArgs(reqs, admitted, costs, part, mode)}
	}
	if err := r.exchange(ctx, sc); err != nil {
		return nil, err
	}
	out := make([]tollgate.Decision, len(reqs))
	for j, part := range parts {
		r.journalSettleCall(sc[j])
		if err := readSettle(sc[j].cmd, part, out); err != nil {
			return nil, err
		}
	}
	if r.deny != nil && mode != settleLook {
		for _, req := range reqs {
			r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm)) // the state changed
		}
	}
	return out, nil
}
