package heavy

import "math/bits"

// index finds a tracked identity's entry by its fingerprint: open
// addressing with linear probing in a fixed table at most half full, and
// deletion by backward shift, so that it never allocates after it is made
// and its size is known. (A Go map churned by one insertion and one
// deletion per eviction may grow, and its bytes are not ours to count.)
type index struct {
	slots []int32 // entry index + 1; 0 is an empty slot
	shift uint    // a fingerprint's home slot is its top bits
}

// newIndex returns an index for up to n entries.
func newIndex(n int) index {
	b := bits.Len(uint(2*n - 1))
	return index{slots: make([]int32, 1<<b), shift: uint(64 - b)}
}

func (x *index) home(fp uint64) int { return int(fp >> x.shift) }

func (x *index) next(i int) int { return (i + 1) & (len(x.slots) - 1) }

// find returns the slot that holds fp, or the empty slot where fp would go.
func (x *index) find(fp uint64, es []entry) int {
	i := x.home(fp)
	for x.slots[i] != 0 && es[x.slots[i]-1].fp != fp {
		i = x.next(i)
	}
	return i
}

// get returns the index of fp's entry in es, or -1.
func (x *index) get(fp uint64, es []entry) int {
	return int(x.slots[x.find(fp, es)]) - 1
}

// put records that es[e] holds fp, which is not in the index.
func (x *index) put(fp uint64, e int, es []entry) {
	x.slots[x.find(fp, es)] = int32(e + 1)
}

// del removes fp, which is in the index, then shifts back the entries
// after it that would no longer be found past the hole.
func (x *index) del(fp uint64, es []entry) {
	hole := x.find(fp, es)
	for j := x.next(hole); x.slots[j] != 0; j = x.next(j) {
		h := x.home(es[x.slots[j]-1].fp)
		// The entry at j stays when its home lies cyclically in (hole, j].
		if (hole < j && hole < h && h <= j) || (j < hole && (hole < h || h <= j)) {
			continue
		}
		x.slots[hole] = x.slots[j]
		hole = j
	}
	x.slots[hole] = 0
}

func (x *index) clear() { clear(x.slots) }
