package heavy

import (
	"cmp"
	"errors"
	"slices"
	"time"
)

// Snapshot is the heaviest refused identities of one rule over a window,
// on one replica (Sketch.Snapshot) or several (Merge). It encodes with
// encoding/json.
type Snapshot struct {
	// Start and End bound the window: the start of its oldest epoch and
	// the time the snapshot was taken (of the earliest and the latest
	// replica, merged).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Key names the HashKey the identities are hashed under, without
	// revealing it; empty when they are shown as they are.
	Key string `json:"key,omitempty"`
	// Total is every refusal counted in the window.
	Total uint64 `json:"total"`
	// Top is the heaviest identities, heaviest first (by Count, then ID).
	Top []Entry `json:"top"`
	// Floor bounds the identities not in Top: none was refused more than
	// Floor times in the window.
	Floor uint64 `json:"floor"`
}

// Entry is one identity's refusals in a window: about Count, at least
// Min and at most Max. On one replica, Count is Max.
type Entry struct {
	// ID is how the identity is shown: itself, or its OpaqueID when the
	// snapshot has a Key. It is valid UTF-8 of at most 64 bytes.
	ID    string `json:"id"`
	Count uint64 `json:"count"`
	Min   uint64 `json:"min"`
	Max   uint64 `json:"max"`
}

// ErrKeys is returned by Merge for snapshots hashed under different keys
// (or some hashed and some not), whose IDs cannot be matched.
var ErrKeys = errors.New("heavy: snapshots hashed under different keys")

// Snapshot returns the n heaviest identities refused in the window that
// ends at now, and the Floor of the others. To merge snapshots, take more
// from each replica than the merged answer needs (see Merge).
func (s *Sketch) Snapshot(now time.Time, n int) Snapshot {
	epoch := s.epochOf(now)
	out := Snapshot{
		Start: time.Unix(0, (epoch-int64(s.epochs)+1)*s.epochLen),
		End:   now,
		Key:   s.keyID,
	}
	var floor uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.turn(epoch)
		f := sh.gather(&out)
		sh.mu.Unlock()
		floor = max(floor, f)
	}
	out.keep(n, floor)
	return out
}

// gather adds sh's tracked identities and refusals to out and returns the
// bound of sh's untracked identities. An identity tracked in some epochs
// of the window is bounded in the others by their Count-Min estimates.
func (sh *shard) gather(out *Snapshot) (floor uint64) {
	type window struct {
		upper, lower uint64
		tracked      uint16 // a bit per epoch, by place in the ring
		id           string
	}
	seen := map[uint64]*window{}
	for e, sum := range sh.ring {
		if sum == nil {
			continue
		}
		out.Total += sum.total
		floor += sum.bound()
		for _, en := range sum.entries {
			w := seen[en.fp]
			if w == nil {
				w = &window{id: string(en.label[:en.n])}
				seen[en.fp] = w
			}
			w.upper += en.count
			w.lower += en.count - en.err
			w.tracked |= 1 << e
		}
	}
	for fp, w := range seen {
		for e, sum := range sh.ring {
			if sum != nil && w.tracked&(1<<e) == 0 {
				w.upper += sum.estimate(fp)
			}
		}
		out.Top = append(out.Top, Entry{ID: w.id, Count: w.upper, Min: w.lower, Max: w.upper})
	}
	return floor
}

// Merge adds snapshots of the same rule and window from several replicas
// into the n heaviest identities of all of them. An identity's Count, Min
// and Max are the sums of those the snapshots list; its Max adds the Floor
// of every snapshot that does not list it, where it may have been refused
// up to that many times. An identity a snapshot does not list counts
// nothing there: ask each replica for several times the n wanted, so that
// the heavy are listed wherever they were refused much. Merging snapshots
// hashed under different keys is ErrKeys.
func Merge(n int, snaps ...Snapshot) (Snapshot, error) {
	if len(snaps) == 0 {
		return Snapshot{}, nil
	}
	type sum struct {
		Entry
		floors uint64 // the floors of the snapshots that list it
		last   int    // the last snapshot that listed it
	}
	out := Snapshot{Start: snaps[0].Start, End: snaps[0].End, Key: snaps[0].Key}
	seen := map[string]*sum{}
	var floors uint64
	for i, sn := range snaps {
		if sn.Key != out.Key {
			return Snapshot{}, ErrKeys
		}
		out.Start, out.End = minTime(out.Start, sn.Start), maxTime(out.End, sn.End)
		out.Total += sn.Total
		floors += sn.Floor
		for _, e := range sn.Top {
			s := seen[e.ID]
			if s == nil {
				s = &sum{Entry: Entry{ID: e.ID}, last: -1}
				seen[e.ID] = s
			}
			s.Count += e.Count
			s.Min += min(e.Min, e.Max)
			s.Max += e.Max
			if s.last != i {
				s.floors += sn.Floor
				s.last = i
			}
		}
	}
	for _, s := range seen {
		s.Max += floors - s.floors
		out.Top = append(out.Top, s.Entry)
	}
	out.keep(n, floors)
	return out, nil
}

// keep sorts Top heaviest first, keeps the first n and makes Floor bound
// the rest too.
func (s *Snapshot) keep(n int, floor uint64) {
	slices.SortFunc(s.Top, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.ID, b.ID))
	})
	n = max(n, 0)
	for _, e := range s.Top[min(n, len(s.Top)):] {
		floor = max(floor, e.Max)
	}
	s.Top = slices.Clip(s.Top[:min(n, len(s.Top))])
	s.Floor = floor
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
