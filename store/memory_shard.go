package store

import (
	"container/heap"
	"sync"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// sweepBudget bounds the expired entries one decision reclaims per shard
// it sweeps: enough to keep up (a decision adds at most two entries), small
// enough to keep each decision short.
const sweepBudget = 16

// memKey names an entry of the Memory store, as a Redis key names a key:
// the state of an identity under an algorithm, or with a requestID, the
// marker of that id for that identity and algorithm.
type memKey struct {
	algorithm tollgate.Algorithm
	hashed    bool   // identity is the SHA-256 of a long Key
	identity  string // Request.Key, or its SHA-256
	requestID string // "" for a state
	// record: with requestID, the settle record of that id, not its marker.
	record bool
}

// marker names the marker of requestID for the state k names.
func (k memKey) marker(requestID string) memKey {
	k.requestID = requestID
	return k
}

// settleRecord names the record of requestID's settlements of the state k
// names.
func (k memKey) settleRecord(requestID string) memKey {
	k.requestID, k.record = requestID, true
	return k
}

// entry is one identity's state under one algorithm, or one request-id
// marker.
type entry struct {
	key memKey
	// state is an algorithm's state: absent from the instant the entry
	// expires, as its Redis key would be.
	state algo.State
	// count is a marker's replays used, or a settle record's final cost:
	// the cost its request id was last settled at.
	count int64
	// expires (µs) is when the entry is gone: the state's expiry, or the
	// marker's.
	expires int64
	index   int // in memShard.byExpiry
}

// memShard is a part of the Memory store under one lock. Entries are in a
// map by name and in a min-heap by expiry: the heap's top is both the next
// entry to reclaim and the one to evict at the bound.
type memShard struct {
	mu       sync.Mutex
	entries  map[memKey]*entry
	byExpiry expiryHeap
	limit    int
	_        [64]byte // keeps neighbouring shards' locks off one cache line
}

// reclaim drops up to sweepBudget entries that expired at or before now.
func (sh *memShard) reclaim(now int64) {
	for i := 0; i < sweepBudget && len(sh.byExpiry) > 0 && sh.byExpiry[0].expires <= now; i++ {
		delete(sh.entries, heap.Pop(&sh.byExpiry).(*entry).key)
	}
}

// live returns the entry named k unless it is absent or expired.
func (sh *memShard) live(k memKey, now int64) *entry {
	e := sh.entries[k]
	if e == nil || e.expires <= now {
		return nil
	}
	return e
}

// state returns the algorithm state named k as Redis would read it at now:
// absent once expired.
func (sh *memShard) state(k memKey, now int64) algo.State {
	if e := sh.live(k, now); e != nil {
		return e.state
	}
	return algo.State{}
}

// upsert returns the entry named k, creating it empty (dropping the entry
// closest to expiry if the shard is full) when it is absent or expired.
func (sh *memShard) upsert(k memKey, now int64) *entry {
	if e := sh.entries[k]; e != nil {
		if e.expires <= now {
			*e = entry{key: k, index: e.index, expires: e.expires}
		}
		return e
	}
	if len(sh.entries) >= sh.limit {
		delete(sh.entries, heap.Pop(&sh.byExpiry).(*entry).key)
	}
	e := &entry{key: k, expires: now}
	sh.entries[k] = e
	heap.Push(&sh.byExpiry, e)
	return e
}

// put writes the state st named k, as an admission's SET … PX of ttl
// milliseconds from now (µs) does.
func (sh *memShard) put(k memKey, st algo.State, now, ttl int64) {
	e := sh.upsert(k, now)
	e.state = st
	sh.setExpiry(e, now+ttl*1000)
}

// mark writes the marker named k, with no replay used, living ttl µs from
// now.
func (sh *memShard) mark(k memKey, now, ttl int64) {
	e := sh.upsert(k, now)
	e.count = 0
	sh.setExpiry(e, now+ttl)
}

// setExpiry moves e to its place in the heap for a new expiry.
func (sh *memShard) setExpiry(e *entry, expires int64) {
	e.expires = expires
	heap.Fix(&sh.byExpiry, e.index)
}

// remove drops the entry named k, if any.
func (sh *memShard) remove(k memKey) {
	if e := sh.entries[k]; e != nil {
		heap.Remove(&sh.byExpiry, e.index)
		delete(sh.entries, k)
	}
}

// expiryHeap is a container/heap of entries, soonest expiry on top.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
