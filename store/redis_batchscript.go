package store

import (
	"slices"
)

// maxShared is the most decisions one batch script call carries, whatever
// WithBatching allows: Redis runs nothing else while a script runs, and 128
// decisions take it well under a millisecond.
const maxShared = 128

// profileArgs is how many ARGV a profile of the batch script takes: mode,
// replay TTL, then an entry's (a decision's limit and cost, entryArgs).
const profileArgs = 2 + entryArgs

// shared is single decisions of one batch sent as one batch script call,
// in the batch script's layout (lua/doc.go): each distinct profile (what a
// call's argv holds: mode, TTL, limit and cost) once, then each decision's
// profile; or inline, each decision's argv in turn, when the decisions
// share too few profiles for that to pay.
type shared struct {
	calls []*call
	args  []any // EVALSHA sha numkeys KEYS... ARGV...
}

// shareCalls splits batch into batch script calls of the single decisions
// (one entry each; at most maxShared per call, and only when there are at
// least two) and the calls sent on their own. With bySlot (a Cluster) only
// decisions on one slot share a call.
func shareCalls(batch []*call, bySlot bool) ([]*shared, []*call) {
	var singles, own []*call
	for _, c := range batch {
		if c.entries == 1 && c.decides() {
			singles = append(singles, c)
		} else {
			own = append(own, c)
		}
	}
	if len(singles) < 2 {
		return nil, batch
	}
	if !bySlot {
		return share(singles, nil, own)
	}
	var out []*shared
	bySlotCalls := make(map[int][]*call)
	for _, c := range singles {
		k := slot(c.keys[0])
		bySlotCalls[k] = append(bySlotCalls[k], c)
	}
	for _, cs := range bySlotCalls {
		out, own = share(cs, out, own)
	}
	return out, own
}

// share appends to out the batch script calls of singles, decisions of one
// slot, and to own the one left alone.
func share(singles []*call, out []*shared, own []*call) ([]*shared, []*call) {
	if alone := inChunks(singles, func(cs []*call) { out = append(out, newShared(cs)) }); alone != nil {
		own = append(own, alone)
	}
	return out, own
}

// inChunks calls add with each piece of calls, in order, of at least two
// and at most maxShared calls, one script call each (a batch script call,
// or a fold), and returns the last call when it would be alone in its piece
// (nil otherwise): a script call of one is sent as that call's own.
func inChunks(calls []*call, add func([]*call)) (alone *call) {
	for len(calls) > 1 {
		n := min(len(calls), maxShared)
		add(calls[:n])
		calls = calls[n:]
	}
	if len(calls) == 1 {
		return calls[0]
	}
	return nil
}

// newShared lays out calls, single decisions, as one batch script call:
// their keys one after the other and their slot's lineage key, then their
// distinct profiles, found by a
// linear scan (a batch holds at most maxShared decisions and usually one or
// two profiles), then each decision's profile. When fewer than two
// decisions share each profile on average, it sends them inline instead,
// each decision's own argv in turn: a profile and a decision's reference to
// it cost Redis more than the decision's own arguments (measured with
// lua.BenchmarkBatchServerCost, limits=each). Every argument is a pointer
// into a call's argv or a small integer (the number of profiles, a
// decision's profile, the TTL of a profile without a request id), which Go
// boxes without allocating. A call whose argv is not one whole decision
// names profile 0, which the script rejects: the whole call fails and
// nothing of it is written.
func newShared(calls []*call) *shared {
	var firstBuf [maxShared]*call // the first call of each distinct profile
	var placeBuf [maxShared]int   // each call's profile, 1-based; 0 for none
	firsts, places := firstBuf[:0], placeBuf[:0]
	nkeys, nargv, whole := 0, 0, true
	for _, c := range calls {
		nkeys += len(c.keys)
		nargv += len(c.argv)
		place := 0
		if len(c.argv) == c.mode.header()+entryArgs { // one whole decision: one entry
			for p, first := range firsts {
				if slices.Equal(first.argv, c.argv) { // the whole profile: mode, TTL with markers, limit, cost
					place = p + 1
					break
				}
			}
			if place == 0 {
				firsts = append(firsts, c)
				place = len(firsts)
			}
		} else {
			whole = false
		}
		places = append(places, place)
	}
	inline := whole && 2*len(firsts) > len(calls)
	if !inline {
		nargv = profileArgs*len(firsts) + len(calls)
	}
	s := &shared{calls: calls, args: make([]any, 3, 3+nkeys+3+nargv)}
	s.args[2] = int64(nkeys + 1)
	for _, c := range calls {
		for i := range c.keys {
			s.args = append(s.args, &c.keys[i])
		}
	}
	// The decisions are on one slot: the first's lineage key is theirs.
	s.args = append(s.args, &calls[0].lineage, eraNone)
	if inline {
		s.args = append(s.args, int64(0))
		for _, c := range calls {
			for i := range c.argv {
				s.args = append(s.args, &c.argv[i])
			}
		}
		return s
	}
	s.args = append(s.args, int64(len(firsts)))
	for _, c := range firsts {
		s.args = append(s.args, &c.argv[0])
		if c.mode.markers() {
			s.args = append(s.args, &c.argv[1])
		} else {
			s.args = append(s.args, int64(0))
		}
		g := c.argv[len(c.argv)-entryArgs:]
		s.args = append(s.args, &g[0], &g[1], &g[2], &g[3], &g[4])
	}
	for _, p := range places {
		s.args = append(s.args, int64(p))
	}
	return s
}
