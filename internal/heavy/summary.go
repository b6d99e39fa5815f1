package heavy

import "container/heap"

// labelCap is the most bytes an identity is shown with (label).
const labelCap = 64

// entry is one tracked identity: its count is an upper bound of its
// refusals in the epoch, count-err a lower bound.
type entry struct {
	fp    uint64
	count uint64
	err   uint64
	pos   int32 // its place in the summary's heap
	n     uint8 // label[:n] is how it is shown
	label [labelCap]byte
}

// summary is one epoch of one shard: the refusals of the identities whose
// fingerprints fall in the shard.
//
// It is an Augmented Sketch (Roy, Khan, Alonso, SIGMOD 2016) in the shape
// of Space-Saving: a fixed set of tracked identities, each counted exactly
// from the moment it enters, in front of a Count-Min sketch that holds
// everyone else. An untracked identity enters when its Count-Min estimate,
// this refusal included, exceeds the least tracked count; the least
// tracked identity leaves, its count folded into the Count-Min (raise).
// The identity enters with that estimate as its count and all of it but
// this refusal as its error.
//
// Space-Saving alone gives an entering identity the least tracked count,
// which is at most N/k for N refusals and k tracked identities, and grows
// toward N/k when many light identities churn through (an attacker who
// arrives after a flood enters with it). Here an identity enters with its
// own Count-Min estimate instead, whose excess over its true count is
// about N/width (plain Count-Min's bound: at most e·N/width with
// probability 1-e^-4), and less with conservative update on skewed
// streams. A tracked identity takes about 100 bytes (its label is most
// of it), a Count-Min column of four cells 16: the memory that would
// track 4,000 identities in each epoch of a Space-Saving (error N/4,000)
// here tracks 1,024 and holds 20,480 columns (error about N/20,480, and
// N is only the untracked refusals). The heaviest identities, once
// tracked, pass no refusal through the Count-Min, which holds only the
// light tail: its noise is the tail's.
type summary struct {
	entries []entry // the tracked identities; cap is how many may be
	heap    []int32 // entries by count, least first
	index   index
	cm      countMin
	total   uint64 // every refusal of the epoch in the shard
}

func newSummary(tracked, width int) *summary {
	return &summary{
		entries: make([]entry, 0, tracked),
		heap:    make([]int32, 0, tracked),
		index:   newIndex(tracked),
		cm:      newCountMin(width),
	}
}

// observe counts one refusal of identity, whose fingerprint is fp; l
// labels it if it enters the tracked set.
func (s *summary) observe(fp uint64, identity string, l *labeler) {
	s.total++
	if e := s.index.get(fp, s.entries); e >= 0 {
		s.entries[e].count++
		heap.Fix(s, int(s.entries[e].pos))
		return
	}
	est := uint64(s.cm.add(fp))
	if len(s.entries) < cap(s.entries) {
		e := len(s.entries)
		s.entries = append(s.entries, entry{pos: int32(e)})
		s.heap = append(s.heap, int32(e))
		s.track(e, fp, est, identity, l)
		heap.Fix(s, e)
		return
	}
	e := int(s.heap[0])
	least := &s.entries[e]
	if est <= least.count {
		return
	}
	s.cm.raise(least.fp, least.count)
	s.index.del(least.fp, s.entries)
	s.track(e, fp, est, identity, l)
	heap.Fix(s, 0)
}

// track makes entries[e] the identity fp with estimate est.
func (s *summary) track(e int, fp, est uint64, identity string, l *labeler) {
	en := &s.entries[e]
	en.fp, en.count, en.err = fp, est, est-1
	en.n = uint8(l.label(&en.label, identity))
	s.index.put(fp, e, s.entries)
}

// bound is an upper bound of the refusals of any untracked identity.
func (s *summary) bound() uint64 { return uint64(s.cm.bound()) }

// estimate is an upper bound of fp's refusals, fp being untracked.
func (s *summary) estimate(fp uint64) uint64 { return uint64(s.cm.estimate(fp)) }

func (s *summary) clear() {
	if s.total == 0 {
		return
	}
	s.entries, s.heap = s.entries[:0], s.heap[:0]
	s.index.clear()
	s.cm.clear()
	s.total = 0
}

// summary's heap.Interface: its heap, least count first. Entries enter by
// append and heap.Fix, never by Push or Pop.

func (s *summary) Len() int { return len(s.heap) }

func (s *summary) Less(i, j int) bool {
	return s.entries[s.heap[i]].count < s.entries[s.heap[j]].count
}

func (s *summary) Swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.entries[s.heap[i]].pos = int32(i)
	s.entries[s.heap[j]].pos = int32(j)
}

func (s *summary) Push(any) { panic("heavy: summary entries enter by append") }

func (s *summary) Pop() any { panic("heavy: summary entries never leave by Pop") }
