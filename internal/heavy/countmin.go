package heavy

import "math"

// rows is the depth of a countMin: an identity's estimate is the least of
// its cells in four independent rows.
const rows = 4

// rowSeeds are the odd multipliers of the multiply-shift hashes that place
// a fingerprint in each row.
var rowSeeds = [rows]uint64{
	0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9, 0xd6e8feb86659fd93,
}

// countMin is a Count-Min sketch with conservative update: an arrival
// raises only the cells that are below the identity's new estimate, so an
// estimate is never below the identity's true count and, on skewed
// streams, far closer to it than plain Count-Min's. It holds the refusals
// of the identities the summary does not track, and the counts of those it
// stopped tracking (raise), so that every identity's count is bounded from
// above by the summary or by this sketch.
//
// Cells saturate at 2^32-1, four billion refusals of one epoch of one
// shard, beyond which an estimate is no longer a bound.
type countMin struct {
	cells []uint32 // rows × width, row after row
	width uint64
	// top is the largest cell of each row: no identity's estimate exceeds
	// the least of them (bound).
	top [rows]uint32
}

func newCountMin(width int) countMin {
	return countMin{cells: make([]uint32, rows*width), width: uint64(width)}
}

// cell is the index of fp's cell in row r.
func (c *countMin) cell(fp uint64, r int) int {
	return r*int(c.width) + int((fp*rowSeeds[r])>>32*c.width>>32)
}

// estimate is an upper bound of the refusals fp's identity has had while
// untracked, and of its count when it was last evicted.
func (c *countMin) estimate(fp uint64) uint32 {
	est := uint32(math.MaxUint32)
	for r := range rows {
		est = min(est, c.cells[c.cell(fp, r)])
	}
	return est
}

// add counts one refusal of fp's identity and returns its new estimate.
func (c *countMin) add(fp uint64) uint32 {
	var at [rows]int
	est := uint32(math.MaxUint32)
	for r := range rows {
		at[r] = c.cell(fp, r)
		est = min(est, c.cells[at[r]])
	}
	if est < math.MaxUint32 {
		est++
	}
	c.lift(&at, est)
	return est
}

// raise makes fp's estimate at least count: the count of an identity the
// summary stops tracking.
func (c *countMin) raise(fp uint64, count uint64) {
	var at [rows]int
	for r := range rows {
		at[r] = c.cell(fp, r)
	}
	c.lift(&at, uint32(min(count, math.MaxUint32)))
}

// lift raises the cells at to at least v.
func (c *countMin) lift(at *[rows]int, v uint32) {
	for r, i := range at {
		if c.cells[i] < v {
			c.cells[i] = v
			c.top[r] = max(c.top[r], v)
		}
	}
}

// bound is an upper bound of every identity's estimate.
func (c *countMin) bound() uint32 {
	b := uint32(math.MaxUint32)
	for _, t := range c.top {
		b = min(b, t)
	}
	return b
}

func (c *countMin) clear() {
	clear(c.cells)
	c.top = [rows]uint32{}
}
