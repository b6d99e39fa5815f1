package store

import (
	"github.com/redis/go-redis/v9"
)

// fold is the seat calls of one batch sent as one seat script call: the
// seat script takes several operations in one call (lua/doc.go), run in
// order at one server time, so Redis parses, dispatches and answers one
// command for all of them, as the batch script does for decisions. (Admit
// calls are not folded: an admission costs Redis its script's body, a
// dozen commands, which one call for several did not make cheaper;
// docs/performance.md.)
type fold struct {
	calls []*call
	sc    scriptCall
}

// foldCalls splits own, a batch's calls sent as script calls of their own,
// into folds of its seat calls (at least two in a fold, at most maxShared)
// and the calls left on their own. With bySlot (a Cluster) only calls on
// one Cluster slot share a fold.
func foldCalls(own []*call, bySlot bool) ([]*fold, []*call) {
	bySlotCalls := make(map[int][]*call)
	var order []int // each Cluster slot as first seen, so folds keep the batch's order
	var rest []*call
	for _, c := range own {
		if c.seat == nil {
			rest = append(rest, c)
			continue
		}
		k := 0
		if bySlot {
			k = slot(c.keys[0])
		}
		if _, seen := bySlotCalls[k]; !seen {
			order = append(order, k)
		}
		bySlotCalls[k] = append(bySlotCalls[k], c)
	}
	var out []*fold
	for _, k := range order {
		if alone := inChunks(bySlotCalls[k], func(cs []*call) { out = append(out, newFold(cs)) }); alone != nil {
			rest = append(rest, alone)
		}
	}
	return out, rest
}

// newFold lays out calls, seat calls, as one seat script call, from each
// call's arguments as it would be sent alone: EVALSHA sha 2 seats hold
// era holdTTL op max id ttl.
func newFold(calls []*call) *fold {
	args := make([]any, 3, 3+6*len(calls)+2)
	args[2] = int64(2 * len(calls))
	for _, c := range calls {
		args = append(args, c.seat.args[3], c.seat.args[4])
	}
	args = append(args, eraNone, calls[0].seat.args[6])
	for _, c := range calls {
		args = append(args, c.seat.args[7:11]...)
	}
	return &fold{calls: calls, sc: scriptCall{script: seatScript, args: args}}
}

// read records each call's answer from cmd, the fold's reply, or the
// error for every call.
func (f *fold) read(cmd redis.Cmder) {
	v, err := cmd.(scriptCmd).Result()
	for _, c := range f.calls {
		if err != nil {
			c.err = err
			continue
		}
		n := c.take(v)
		if n < 0 {
			err = errBadReply
			c.err = err
			continue
		}
		v = v[n:]
	}
	if err == nil && len(v) > 0 { // more than the calls' answers
		for _, c := range f.calls {
			c.err = errBadReply
		}
	}
}

// take records c's answer, a seat or admit call's, from the head of v, a
// reply of its script, and returns how many integers it took: -1 (and
// c.err set) when v does not start with a whole answer.
func (c *call) take(v []int64) int {
	if c.seat != nil {
		want := len(seatReply{})
		if c.seat.op == seatRelease || c.seat.op == seatCount {
			want = 2
		}
		if len(v) < want {
			c.err = errBadReply
			return -1
		}
		c.seat.reply = seatReply{}
		copy(c.seat.reply[:], v[:want])
		return want
	}
	a := c.admit
	sd, ds, n, err := decodeAdmit(v, c.entries, c.seqs)
	if err != nil {
		c.err = err
		return -1
	}
	a.answer, a.judged = sd, ds != nil
	if a.judged {
		copy(c.decisions, ds)
		c.now = ds[0].At.UnixMicro()
	}
	return n
}
