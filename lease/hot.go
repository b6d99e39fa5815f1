package lease

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/tollgate/tollgate"
)

// hotCounter counts decisions per identity in fixed intervals, in a table
// of hotCells counters whatever the number of identities, so that the long
// tail of cold identities costs one atomic add each and no memory of its
// own. Each cell packs the interval's number (high 32 bits) and its count
// (low 32 bits); a decision in a later interval starts the cell afresh.
//
// Identities sharing a cell count together, so a cold identity may be taken
// for hot: it then leases (small leases, sized to its own rate from then
// on) and drops back to the inner store at its next renewal. That costs a
// lease's worth of units at most, never over-admission.
type hotCounter struct {
	seed     maphash.Seed
	n        int64 // decisions within one interval above which an identity is hot
	interval int64 // nanoseconds
	cells    [hotCells]atomic.Uint64
}

// hit counts one decision for key under alg at now (nanoseconds) and
// reports whether the identity is hot: decided more than n times in the
// current interval.
func (h *hotCounter) hit(key string, alg tollgate.Algorithm, now int64) bool {
	if h.n == 0 {
		return true
	}
	cell := &h.cells[(maphash.String(h.seed, key)+uint64(alg)*0x9e3779b97f4a7c15)%hotCells]
	epoch := uint64(now/h.interval) << 32
	for {
		v := cell.Load()
		if v&^(1<<32-1) == epoch {
			return int64(cell.Add(1)&(1<<32-1)) > h.n
		}
		if cell.CompareAndSwap(v, epoch|1) {
			return 1 > h.n
		}
	}
}
