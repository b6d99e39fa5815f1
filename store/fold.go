package store

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// fold is the slot calls, or the admit calls, of one batch sent as one
// script call: the slot and admit scripts take several operations in one
// call (lua/doc.go), run in order, so Redis pays a script call's own cost
// (the EVALSHA, its KEYS and ARGV tables, TIME, the reply) once for all of
// them, as the batch script does for decisions.
type fold struct {
	calls []*call
	sc    scriptCall
}

// foldCalls splits own, a batch's calls sent as script calls of their own,
// into folds of its slot calls and of its admit calls (at least two in a
// fold, at most maxShared) and the calls left on their own. With bySlot (a
// Cluster) only calls on one Cluster slot share a fold.
func foldCalls(own []*call, bySlot bool) ([]*fold, []*call) {
	type kind struct {
		admit bool
		slot  int
	}
	byKind := make(map[kind][]*call)
	var order []kind // the first appearance of each kind, so folds keep the batch's order
	var rest []*call
	for _, c := range own {
		if c.admit == nil && c.slot == nil {
			rest = append(rest, c)
			continue
		}
		k := kind{admit: c.admit != nil}
		if bySlot {
			k.slot = slot(c.keys[0])
		}
		if _, seen := byKind[k]; !seen {
			order = append(order, k)
		}
		byKind[k] = append(byKind[k], c)
	}
	var out []*fold
	for _, k := range order {
		cs := byKind[k]
		for len(cs) > 0 {
			n := min(len(cs), maxShared)
			if n == 1 {
				rest = append(rest, cs[0])
				break
			}
			out = append(out, newFold(cs[:n]))
			cs = cs[n:]
		}
	}
	return out, rest
}

// newFold lays out calls, all slot calls or all admit calls, as one call
// of their script, taking each call's arguments as it would be sent alone
// (slotCall's and AllowAllWithSlot's layouts).
func newFold(calls []*call) *fold {
	f := &fold{calls: calls}
	if calls[0].slot != nil {
		// Alone: EVALSHA sha 2 slots hold holdTTL op max id ttl.
		args := make([]any, 3, 3+6*len(calls)+1)
		args[2] = int64(2 * len(calls))
		for _, c := range calls {
			args = append(args, c.slot.args[3], c.slot.args[4])
		}
		args = append(args, calls[0].slot.args[5])
		for _, c := range calls {
			args = append(args, c.slot.args[6:10]...)
		}
		f.sc = scriptCall{script: slotScript, args: args}
		return f
	}
	// Alone: EVALSHA sha k KEYS... 1 k a ARGV...
	nkeys, nargv := 0, 0
	for _, c := range calls {
		k := int(c.admit.args[2].(int64))
		nkeys += k
		nargv += len(c.admit.args) - 6 - k
	}
	args := make([]any, 3, 3+nkeys+1+2*len(calls)+nargv)
	args[2] = int64(nkeys)
	for _, c := range calls {
		k := int(c.admit.args[2].(int64))
		args = append(args, c.admit.args[3:3+k]...)
	}
	args = append(args, int64(len(calls)))
	for _, c := range calls {
		k := int(c.admit.args[2].(int64))
		args = append(args, c.admit.args[4+k:6+k]...)
	}
	for _, c := range calls {
		k := int(c.admit.args[2].(int64))
		args = append(args, c.admit.args[6+k:]...)
	}
	f.sc = scriptCall{script: admitScript, args: args}
	return f
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
}

// take records c's answer, a slot or admit call's, from the head of v, a
// reply of its script, and returns how many integers it took: -1 (and
// c.err set) when v does not start with a whole answer.
func (c *call) take(v []int64) int {
	if c.slot != nil {
		want := len(slotReply{})
		if c.slot.op == slotRelease || c.slot.op == slotCount {
			want = 2
		}
		if len(v) < want {
			c.err = errBadReply
			return -1
		}
		c.slot.reply = slotReply{}
		copy(c.slot.reply[:], v[:want])
		return want
	}
	a := c.admit
	sd, ds, n, err := decodeAdmit(v, c.groups)
	if err != nil {
		c.err = err
		return -1
	}
	a.slot, a.judged = sd, ds != nil
	if a.judged {
		copy(c.decisions, ds)
		c.now = ds[0].At.UnixMicro()
	}
	return n
}

// decodeAdmit decodes one admission's answer at the head of v (lua/doc.go)
// for groups groups: the slot's answer (Allowed: taken) and, unless no
// slot was free (nil), the decisions; and how many integers it took.
func decodeAdmit(v []int64, groups int) (tollgate.SlotDecision, []tollgate.Decision, int, error) {
	if len(v) < len(slotReply{}) {
		return tollgate.SlotDecision{}, nil, 0, errBadReply
	}
	var g slotReply
	copy(g[:], v)
	sd := tollgate.SlotDecision{InUse: g[slotHeld], Reused: g[slotReused] == 1, RetryAfter: micros(g[slotRetryAfter]), Hold: micros(g[slotHold])}
	switch g[slotAllowed] {
	case admitDenied:
		return sd, nil, len(g), nil
	case admitTaken:
		sd.Allowed = true
	case admitFree:
	default:
		return tollgate.SlotDecision{}, nil, 0, errBadReply
	}
	n := len(g) + groupReplyLen*groups + 1
	if len(v) < n {
		return tollgate.SlotDecision{}, nil, 0, errBadReply
	}
	d := v[len(g):n]
	at := time.UnixMicro(d[len(d)-1])
	out := make([]tollgate.Decision, groups)
	for i := range out {
		out[i] = groupReply(d[groupReplyLen*i:]).decision()
		out[i].At = at
	}
	return sd, out, n, nil
}
