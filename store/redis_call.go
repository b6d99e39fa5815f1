package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// decideMode is how a decide call judges its entries: a peek, or a decision
// with or without a request id.
type decideMode struct {
	peek bool // judge only: no debit, no marker read or written
	// replays > 0: the entries carry the markers of requestID, an admission
	// replays at most replays times and its markers live ttlMs.
	replays, ttlMs int64
	requestID      string
}

// ARGV[1] of a decide call (lua/doc.go) without a request id, and of a
// peek; with markers it is the replays.
const (
	modeNoID = 0
	modePeek = -1
)

// modeFor is the mode of a decision carrying requestID, whose ReplayTTL is
// replayTTL: with markers when it has an id and request ids are on.
func (p replays) modeFor(requestID string, replayTTL time.Duration) decideMode {
	if requestID == "" || p.max == 0 {
		return decideMode{}
	}
	return decideMode{replays: p.max, ttlMs: p.ttlMsFor(replayTTL), requestID: requestID}
}

// markers reports whether the call reads and writes request-id markers.
func (m decideMode) markers() bool { return !m.peek && m.replays > 0 }

// markerID is the request id whose markers the call keeps; "" without
// markers.
func (m decideMode) markerID() string {
	if m.markers() {
		return m.requestID
	}
	return ""
}

// header is how many ARGV come before the entries': the mode, and the
// markers' TTL when there are markers.
func (m decideMode) header() int {
	if m.markers() {
		return 2
	}
	return 1
}

// arg is the mode as ARGV[1] carries it.
func (m decideMode) arg() int64 {
	switch {
	case m.peek:
		return modePeek
	case m.markers():
		return m.replays
	}
	return modeNoID
}

const (
	maxHeader = 2 // mode, replay TTL
	entryArgs = 5 // algorithm, rate, period, capacity, cost
)

// call is one decide script call on its way to Redis: the script's KEYS and
// ARGV, laid out so that handing them to go-redis (as pointers, which box
// without allocating) costs nothing beyond the call itself, and the answer.
// A call of one entry (a single decision) uses the arrays in the call; a
// call of several entries allocates its slices. Its keys are laid out by
// its maker (see newCall, decisionCall).
type call struct {
	entries int
	mode    decideMode
	keys    []string // the entries' state keys, then their markers
	lineage string   // the lineage key of their slot, the script's last KEYS
	argv    []int64  // mode, replay TTL (with markers), then entryArgs per entry
	args    []any    // EVALSHA sha numkeys KEYS... lineage era argv...
	// deadline is the caller's context deadline; zero for none.
	deadline time.Time
	// admit, when set, makes the call an admit script call (a seat with
	// the decision; see AllowAllWithSeat) instead of a decide call.
	admit *admitPart
	// seat, when set, makes the call a seat script call (see seatCall).
	seat *seatPart
	// settle, when set, makes the call a settle script call (see
	// settleCall), which the batcher folds with others of its mode.
	settle *settlePart
	// finish, when set, makes the call a finish script call (see
	// finishCall).
	finish *finishPart

	// Written by whoever runs the call, then signalled on done.
	decisions []tollgate.Decision // one per entry, valid when err is nil
	seqs      []int64             // each entry's state's sequence as written (0: none)
	now       int64               // the server time of the reply, µs
	era       string              // the era the call was stamped with ("" none)
	err       error
	done      chan struct{} // capacity 1, so the runner never blocks on a caller that left

	keyBuf      [2]string
	argvBuf     [maxHeader + entryArgs]int64
	argBuf      [3 + 2 + 1 + 1 + maxHeader + entryArgs]any
	decisionBuf [1]tollgate.Decision
	seqBuf      [1]int64
}

// calls recycles calls whose caller read the answer. A call abandoned by
// its caller (context done while it was in flight) is left to the garbage
// collector: its runner may still write to it.
var calls = sync.Pool{New: func() any {
	return &call{done: make(chan struct{}, 1)}
}}

// newCall takes a call from the pool and fills it in under ctx for reqs
// (normalized, one part's worth; see layout) in mode, with keys as its
// KEYS: the requests' state keys, then, when mode has markers, their
// markers, then their slot's lineage key. The call keeps keys.
func (k *keySpace) newCall(ctx context.Context, reqs []tollgate.Request, keys []string, mode decideMode) *call {
	c := calls.Get().(*call)
	c.fill(ctx, reqs, keys, k.lineage.of(keys[0]), mode)
	return c
}

// decisionCall is newCall for a single decision, req (normalized): its
// keys are written into the call's own array, so that they cost only their
// names.
func (k *keySpace) decisionCall(ctx context.Context, req tollgate.Request, mode decideMode) *call {
	c := calls.Get().(*call)
	n := fillDecisionKeys(&c.keyBuf, k.of(req.Key), req.Limit.Algorithm, req.Key, mode.markerID())
	c.fill(ctx, []tollgate.Request{req}, c.keyBuf[:n], k.lineage.of(c.keyBuf[0]), mode)
	return c
}

// fill lays c out under ctx as the decide call of reqs in mode, whose KEYS
// are keys and the lineage key lineage (see newCall).
func (c *call) fill(ctx context.Context, reqs []tollgate.Request, keys []string, lineage string, mode decideMode) {
	n := len(reqs)
	nkeys, header := len(keys)+1, mode.header()
	nargv := header + entryArgs*n
	c.entries, c.mode, c.keys, c.lineage = n, mode, keys, lineage
	if n == 1 {
		c.argv, c.args, c.decisions, c.seqs = c.argvBuf[:nargv], c.argBuf[:3+nkeys+1+nargv], c.decisionBuf[:], c.seqBuf[:]
	} else {
		c.argv, c.args, c.decisions, c.seqs = make([]int64, nargv), make([]any, 3+nkeys+1+nargv), make([]tollgate.Decision, n), make([]int64, n)
	}
	c.argv[0] = mode.arg()
	if mode.markers() {
		c.argv[1] = mode.ttlMs
	}
	for i, req := range reqs {
		p := algo.ParamsOf(req)
		g := c.argv[header+entryArgs*i:]
		g[0], g[1], g[2], g[3], g[4] = int64(req.Limit.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost
	}
	c.args[2] = int64(nkeys)
	for i := range c.keys {
		c.args[3+i] = &c.keys[i]
	}
	c.args[3+len(c.keys)] = &c.lineage
	c.args[3+nkeys] = eraNone
	for i := range c.argv {
		c.args[4+nkeys+i] = &c.argv[i]
	}
	c.deadline, _ = ctx.Deadline()
	c.now, c.err, c.admit, c.seat, c.settle, c.finish, c.era = 0, nil, nil, nil, nil, nil, ""
	clear(c.seqs)
}

// scriptCall is c as the send path takes it alone: a decide call, an
// admit call, a seat call or a settle call.
func (c *call) scriptCall() scriptCall {
	switch {
	case c.admit != nil:
		return scriptCall{script: admitScript, args: c.admit.args}
	case c.seat != nil:
		return scriptCall{script: seatScript, args: c.seat.args}
	case c.settle != nil:
		return scriptCall{script: settleScript, args: settleArgs([]*settlePart{c.settle})}
	case c.finish != nil:
		return scriptCall{script: finishScript, args: c.finish.args()}
	}
	return scriptCall{script: decideScript, args: c.args}
}

// readReply records cmd's reply, c's script call's, with the decoder of
// its script.
func (c *call) readReply(cmd redis.Cmder) {
	if c.settle != nil || c.finish != nil {
		var err error
		if c.settle != nil {
			err = readSettles(cmd, []*settlePart{c.settle})
		} else {
			err = c.finish.read(cmd)
		}
		if err != nil {
			c.err = err
		}
		return
	}
	if c.decides() {
		c.read(cmd)
		return
	}
	v, err := cmd.(scriptCmd).Result()
	if err == nil && c.take(v) != len(v) {
		err = errBadReply
	}
	if err != nil {
		c.err = err
	}
}

// decides reports whether c is a decide call: not an admit, seat, settle
// or finish call.
func (c *call) decides() bool {
	return c.admit == nil && c.seat == nil && c.settle == nil && c.finish == nil
}

// debited reports whether the call, answered without an error, debited its
// entries: it admitted them and did not replay an earlier admission.
func (c *call) debited() bool { return c.decisions[0].Allowed && !c.decisions[0].Replayed }
