package store

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/sha256"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// DefaultMaxKeys is the bound on entries a Memory store holds unless
// WithMaxKeys says otherwise: about a million identities and request ids.
const DefaultMaxKeys = 1 << 20

// Memory is an in-process tollgate.Store. It runs the same algorithms as the
// Redis scripts (their Go mirror, bit for bit), keeps the same state with the
// same expiry, and handles request ids the same way, so for one process it
// gives the answers a Redis store would. It does not share a quota between
// processes: that is what the Redis store is for.
//
// Each identity (Key and Algorithm) is one entry, and each remembered request
// id is another. An entry is dropped when its state would have expired in
// Redis, lazily: every decision reclaims a few expired entries of its own
// shard and of one other, so there is no goroutine to stop. The number of
// entries is bounded (see WithMaxKeys).
//
// A Memory is safe for concurrent use; identities are spread over up to 64
// independently locked shards.
type Memory struct {
	clock     func() time.Time
	maxKeys   int
	replays   replays
	seed      maphash.Seed
	shards    []memShard
	next      atomic.Uint64 // the shard the next decision sweeps
	slots     memSlots      // in-flight slots (slots_memory.go)
	overrides memOverrides  // overrides_memory.go
}

// WithClock sets the clock the store reads (default time.Now), for tests and
// simulations; it must be safe for concurrent use. Only its microseconds
// since the Unix epoch are used.
func WithClock(now func() time.Time) MemoryOption {
	return memoryOption(func(m *Memory) {
		if now != nil {
			m.clock = now
		}
	})
}

// WithMaxKeys bounds how many entries (identity states and remembered
// request ids) the store holds; n ≤ 0 means DefaultMaxKeys. When a new
// entry would exceed the bound, the entry closest to expiry in its shard is
// dropped first: a bucket about to be full again, a window about to end, a
// request id about to be forgotten. Its identity then starts afresh (a full
// bucket, an empty window; an id judged anew), so a store too small for its
// traffic admits a little more than its limits rather than grow.
func WithMaxKeys(n int) MemoryOption {
	return memoryOption(func(m *Memory) {
		if n > 0 {
			m.maxKeys = n
		}
	})
}

// NewMemory returns an empty in-process store.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		clock:   time.Now,
		maxKeys: DefaultMaxKeys,
		replays: defaultReplays(),
		seed:    maphash.MakeSeed(),
	}
	for _, o := range opts {
		o.applyMemory(m)
	}
	// Small stores get one shard, so that the bound evicts the entry
	// closest to expiry store-wide; large ones spread over 64.
	n := min(max(m.maxKeys/minShardKeys, 1), maxShards)
	m.shards = make([]memShard, n)
	for i := range m.shards {
		sh := &m.shards[i]
		sh.entries = make(map[entryKey]*entry)
		sh.limit = m.maxKeys / n
		if i < m.maxKeys%n {
			sh.limit++
		}
	}
	return m
}

const (
	maxShards    = 64
	minShardKeys = 1024
	// sweepBudget bounds the expired entries one decision reclaims per
	// shard it sweeps: enough to keep up (a decision adds at most two
	// entries), small enough to keep each decision short.
	sweepBudget = 16
	// maxRawIdentity is the longest Key kept verbatim; longer ones are
	// kept as their SHA-256, so that memory per entry stays small.
	maxRawIdentity = sha256.Size * 2
)

// Allow makes one decision. It returns an error wrapping
// tollgate.ErrInvalidRequest for an invalid request, ctx's error if ctx is
// already done, and no other.
func (m *Memory) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.Decision{}, err
	}
	req, err := req.Normalized()
	if err != nil {
		return tollgate.Decision{}, err
	}
	now := m.clock().UnixMicro()
	decide := algo.For(req.Limit.Algorithm)
	p := algo.ParamsOf(req)
	sh, stateKey := m.locate(req)
	sh.mu.Lock()
	sh.reclaim(now)
	d := m.decide(sh, stateKey, req.RequestID, m.replays.ttlMsFor(req.ReplayTTL)*1000, decide, p, now)
	sh.mu.Unlock()

	// Also sweep one other shard, in turn, so that expired entries are
	// reclaimed even in shards no decision lands on any more.
	if len(m.shards) > 1 {
		o := &m.shards[m.next.Add(1)%uint64(len(m.shards))]
		if o != sh && o.mu.TryLock() {
			o.reclaim(now)
			o.mu.Unlock()
		}
	}
	return d, nil
}

// decide is main.lua: request-id replay, then the algorithm, then the
// writes of an admission, the marker living markerTTL µs. sh is locked.
func (m *Memory) decide(sh *memShard, stateKey entryKey, requestID string, markerTTL int64, decide algo.Func, p algo.Params, now int64) tollgate.Decision {
	var markerKey entryKey
	useMarker := m.replays.max > 0 && requestID != ""
	if useMarker {
		markerKey = stateKey
		markerKey.requestID = requestID
		if e := sh.live(markerKey, now); e != nil && e.replays < m.replays.max {
			e.replays++
			peek := p
			peek.Cost = 0
			_, r := decide(sh.state(stateKey, now), now, peek)
			return tollgate.Decision{
				Allowed:    true,
				Remaining:  r.Remaining,
				ResetAfter: micros(r.ResetAfter),
				Replayed:   true,
			}
		}
	}

	st, r := decide(sh.state(stateKey, now), now, p)
	if r.Allowed {
		e := sh.upsert(stateKey, now)
		e.state = st
		sh.setExpiry(e, now+r.TTL*1000)
		if useMarker {
			mk := sh.upsert(markerKey, now)
			mk.replays = 0
			sh.setExpiry(mk, now+markerTTL)
		}
	}
	return tollgate.Decision{
		Allowed:    r.Allowed,
		Remaining:  r.Remaining,
		RetryAfter: micros(r.RetryAfter),
		ResetAfter: micros(r.ResetAfter),
	}
}

// Len returns the number of entries held: identity states and remembered
// request ids, including expired ones not reclaimed yet.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// entryKey names an entry, as a Redis key names a key: the state of an
// identity under an algorithm, or with a requestID, the marker of that id
// for that identity and algorithm.
type entryKey struct {
	algorithm tollgate.Algorithm
	hashed    bool   // identity is the SHA-256 of a long Key
	identity  string // Request.Key, or its SHA-256
	requestID string // "" for a state
}

// entry is one identity's state under one algorithm, or one request-id
// marker.
type entry struct {
	key entryKey
	// state is an algorithm's state: absent from the instant the entry
	// expires, as its Redis key would be.
	state algo.State
	// replays is a marker's count of replays used.
	replays int64
	// expires (µs) is when the entry is gone: the state's expiry, or the
	// marker's.
	expires int64
	index   int // in memShard.byExpiry
}

// memShard is a part of the store under one lock. Entries are in a map by
// name and in a min-heap by expiry: the heap's top is both the next entry to
// reclaim and the one to evict at the bound.
type memShard struct {
	mu       sync.Mutex
	entries  map[entryKey]*entry
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
func (sh *memShard) live(k entryKey, now int64) *entry {
	e := sh.entries[k]
	if e == nil || e.expires <= now {
		return nil
	}
	return e
}

// state returns the algorithm state named k as Redis would read it at now:
// absent once expired.
func (sh *memShard) state(k entryKey, now int64) algo.State {
	if e := sh.live(k, now); e != nil {
		return e.state
	}
	return algo.State{}
}

// upsert returns the entry named k, creating it empty (dropping the entry
// closest to expiry if the shard is full) when it is absent or expired.
func (sh *memShard) upsert(k entryKey, now int64) *entry {
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

// setExpiry moves e to its place in the heap for a new expiry.
func (sh *memShard) setExpiry(e *entry, expires int64) {
	e.expires = expires
	heap.Fix(&sh.byExpiry, e.index)
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

// locate returns the shard and the state entry's name for a normalized
// request.
func (m *Memory) locate(req tollgate.Request) (*memShard, entryKey) {
	identity, hashed := req.Key, false
	if len(identity) > maxRawIdentity {
		sum := sha256.Sum256([]byte(identity))
		identity, hashed = string(sum[:]), true
	}
	k := entryKey{algorithm: req.Limit.Algorithm, hashed: hashed, identity: identity}
	return &m.shards[maphash.String(m.seed, req.Key)%uint64(len(m.shards))], k
}

// AllowAll decides reqs all or nothing (see tollgate.Store): the shards of
// every request are locked, in order, for the whole decision.
func (m *Memory) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	reqs, err := normalizeAll(reqs)
	if err != nil {
		return nil, err
	}
	now := m.clock().UnixMicro()
	shards := make([]*memShard, len(reqs))
	keys := make([]entryKey, len(reqs))
	for i, req := range reqs {
		shards[i], keys[i] = m.locate(req)
	}
	unlock := m.lockShards(shards)
	defer unlock()
	for _, sh := range shards {
		sh.reclaim(now)
	}

	out := make([]tollgate.Decision, len(reqs))
	requestID := reqs[0].RequestID
	markerTTL := m.replays.ttlMsFor(setReplayTTL(reqs)) * 1000
	useMarker := m.replays.max > 0 && requestID != ""
	markers := make([]entryKey, len(reqs))
	if useMarker {
		replay := true
		for i := range reqs {
			markers[i] = keys[i]
			markers[i].requestID = requestID
			if e := shards[i].live(markers[i], now); e == nil || e.replays >= m.replays.max {
				replay = false
			}
		}
		if replay {
			// Requests on one state share its marker, counted once.
			counted := make(map[entryKey]bool, len(reqs))
			for i, req := range reqs {
				if !counted[markers[i]] {
					counted[markers[i]] = true
					shards[i].live(markers[i], now).replays++
				}
				p := algo.ParamsOf(req)
				p.Cost = 0
				_, r := algo.For(req.Limit.Algorithm)(shards[i].state(keys[i], now), now, p)
				out[i] = tollgate.Decision{Allowed: true, Remaining: r.Remaining, ResetAfter: micros(r.ResetAfter), Replayed: true}
			}
			return out, nil
		}
	}

	// Judge in order on working copies, so that two requests on one state
	// see each other's debits.
	work := make(map[entryKey]algo.State, len(reqs))
	states := make([]algo.State, len(reqs))
	results := make([]algo.Result, len(reqs))
	all := true
	for i, req := range reqs {
		st, ok := work[keys[i]]
		if !ok {
			st = shards[i].state(keys[i], now)
		}
		st, r := algo.For(req.Limit.Algorithm)(st, now, algo.ParamsOf(req))
		work[keys[i]], states[i], results[i] = st, st, r
		all = all && r.Allowed
		out[i] = tollgate.Decision{
			Allowed:    r.Allowed,
			Remaining:  r.Remaining,
			RetryAfter: micros(r.RetryAfter),
			ResetAfter: micros(r.ResetAfter),
		}
	}
	if !all {
		for i := range out {
			out[i].Allowed = false
		}
		return out, nil
	}
	for i := range reqs {
		sh := shards[i]
		e := sh.upsert(keys[i], now)
		e.state = states[i]
		sh.setExpiry(e, now+results[i].TTL*1000)
		if useMarker {
			mk := sh.upsert(markers[i], now)
			mk.replays = 0
			sh.setExpiry(mk, now+markerTTL)
		}
	}
	return out, nil
}

// lockShards locks each distinct shard of m once, in the order of m.shards
// so that concurrent calls cannot deadlock, and returns the function that
// unlocks them.
func (m *Memory) lockShards(shards []*memShard) func() {
	distinct := slices.Clone(shards)
	slices.SortFunc(distinct, func(a, b *memShard) int { return cmp.Compare(m.shardIndex(a), m.shardIndex(b)) })
	distinct = slices.Compact(distinct)
	for _, sh := range distinct {
		sh.mu.Lock()
	}
	return func() {
		for _, sh := range distinct {
			sh.mu.Unlock()
		}
	}
}

// shardIndex returns sh's index in m.shards.
func (m *Memory) shardIndex(sh *memShard) int {
	for i := range m.shards {
		if &m.shards[i] == sh {
			return i
		}
	}
	return -1
}

// Peek reports what Allow would answer for req now, without a debit and
// without recording its RequestID.
func (m *Memory) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.Decision{}, err
	}
	req, err := req.Normalized()
	if err != nil {
		return tollgate.Decision{}, err
	}
	now := m.clock().UnixMicro()
	sh, k := m.locate(req)
	sh.mu.Lock()
	_, r := algo.For(req.Limit.Algorithm)(sh.state(k, now), now, algo.ParamsOf(req))
	sh.mu.Unlock()
	return tollgate.Decision{
		Allowed:    r.Allowed,
		Remaining:  r.Remaining,
		RetryAfter: micros(r.RetryAfter),
		ResetAfter: micros(r.ResetAfter),
	}, nil
}

// Reset forgets req's Key under req's algorithm: a full bucket or an empty
// window again. Request ids it admitted are still remembered.
func (m *Memory) Reset(ctx context.Context, req tollgate.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := req.Normalized()
	if err != nil {
		return err
	}
	sh, k := m.locate(req)
	sh.mu.Lock()
	if e := sh.entries[k]; e != nil {
		heap.Remove(&sh.byExpiry, e.index)
		delete(sh.entries, k)
	}
	sh.mu.Unlock()
	return nil
}
