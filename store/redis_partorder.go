package store

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/tollgate/tollgate"
)

// levels remembers, for the states the parts of recent sets decided, the
// units they had left: AllowAll on a Cluster decides first the part of a
// set most likely to deny (see riskiest). It is a fixed table of
// levelEntries entries indexed by a hash of the state, each overwritten by
// the latest decision landing on it: bounded memory, no lock. A lost or
// mixed-up entry only changes which part goes first, never a decision.
type levels struct {
	seed    maphash.Seed
	entries [levelEntries]levelEntry
}

// levelEntries is the size of the table, a power of two.
const levelEntries = 4096

type levelEntry struct {
	tag  atomic.Uint64 // hash of the state, never 0 when set
	left atomic.Int64  // units left after its latest decision
}

func newLevels() *levels { return &levels{seed: maphash.MakeSeed()} }

// hash is the table's hash of req's state; never 0.
func (lv *levels) hash(req tollgate.Request) uint64 {
	return maphash.Comparable(lv.seed, stateKey{req.Key, req.Limit.Algorithm}) | 1
}

// note records what d left of req's state.
func (lv *levels) note(req tollgate.Request, d tollgate.Decision) {
	h := lv.hash(req)
	e := &lv.entries[h&(levelEntries-1)]
	e.tag.Store(h)
	e.left.Store(d.Remaining)
}

// left is the units req's state had left when last seen, or its capacity
// when it was not: an identity this process has not seen lately is
// probably not near its limit.
func (lv *levels) left(req tollgate.Request) int64 {
	h := lv.hash(req)
	e := &lv.entries[h&(levelEntries-1)]
	if e.tag.Load() == h {
		return e.left.Load()
	}
	return req.Limit.Capacity()
}

// riskiest returns the index of the part of reqs most likely to deny: the
// one with a request that has the fewest calls of its cost left, as last
// seen (the first such part on a tie). A shared state such as a global
// rule's is usually it, being nearer its limit than any one tenant's.
func (lv *levels) riskiest(reqs []tollgate.Request, parts [][]int) int {
	best, bestLeft := 0, int64(-1)
	for j, part := range parts {
		for _, i := range part {
			calls := max(lv.left(reqs[i]), 0) / reqs[i].Cost
			if bestLeft < 0 || calls < bestLeft {
				best, bestLeft = j, calls
			}
		}
	}
	return best
}
