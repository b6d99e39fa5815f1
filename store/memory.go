package store

import (
	"context"
	"crypto/sha256"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/check"
)

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
	seats     memSeats      // in-flight seats (seats_memory.go)
	overrides memOverrides  // overrides_memory.go
	watchers  memWatchers   // overrides_watch.go
	shares    memShares     // share_memory.go
	refused   memRefused    // memory_refused.go
}

const (
	maxShards    = 64
	minShardKeys = 1024
	// maxRawIdentity is the longest Key kept verbatim; longer ones are
	// kept as their SHA-256, so that memory per entry stays small.
	maxRawIdentity = sha256.Size * 2
)

// NewMemory returns an empty in-process store. An option given a value
// outside its range is an error (ErrInvalidOption).
func NewMemory(opts ...MemoryOption) (*Memory, error) {
	m := &Memory{
		clock:   time.Now,
		maxKeys: defaultMaxKeys,
		replays: defaultReplays(),
		seed:    maphash.MakeSeed(),
	}
	for _, o := range opts {
		if err := o.applyMemory(m); err != nil {
			return nil, err
		}
	}
	// Small stores get one shard, so that the bound evicts the entry
	// closest to expiry store-wide; large ones spread over 64.
	n := min(max(m.maxKeys/minShardKeys, 1), maxShards)
	m.shards = make([]memShard, n)
	for i := range m.shards {
		sh := &m.shards[i]
		sh.entries = make(map[memKey]*entry)
		sh.limit = m.maxKeys / n
		if i < m.maxKeys%n {
			sh.limit++
		}
	}
	return m, nil
}

// Allow makes one decision. It returns an error wrapping
// tollgate.ErrInvalidRequest for an invalid request, ctx's error if ctx is
// already done, and no other.
func (m *Memory) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.Decision{}, err
	}
	if err := check.NormalizeInPlace(&req); err != nil { // not begin: its copies of req cost a decision about 5%
		return tollgate.Decision{}, err
	}
	if req.Overdraw {
		d, err := m.AllowAll(ctx, []tollgate.Request{req})
		if err != nil {
			return tollgate.Decision{}, err
		}
		return d[0], nil
	}
	if req.RequestID == "" || m.replays.max == 0 {
		return m.decideOne(req), nil
	}
	var set [1]member
	m.decide([]tollgate.Request{req}, set[:], req.ReplayTTL)
	return set[0].d, nil
}

// decideOne is decide for one request without markers, without the
// bookkeeping of a set, which costs a single decision about a sixth more
// (BenchmarkMemoryAllow, keys=1).
func (m *Memory) decideOne(req tollgate.Request) tollgate.Decision {
	now := m.clock().UnixMicro()
	decide, p := algo.For(req.Limit.Algorithm), algo.ParamsOf(req)
	sh, _, k := m.locate(req)
	sh.mu.Lock()
	sh.reclaim(now)
	st, r := decide(sh.state(k, now), now, p)
	if r.Allowed {
		sh.put(k, st, now, r.TTL)
	}
	sh.mu.Unlock()
	m.sweep(sh, now)
	return decisionOf(r, now)
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
	set := make([]member, len(reqs))
	if reqs[0].Overdraw {
		m.overdraw(reqs, set)
	} else {
		m.decide(reqs, set, setReplayTTL(reqs))
	}
	out := make([]tollgate.Decision, len(reqs))
	for i := range set {
		out[i] = set[i].d
	}
	return out, nil
}

// Peek reports what Allow would answer for req now, without a debit and
// without recording its RequestID.
func (m *Memory) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	req, err := begin(ctx, req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	now := m.clock().UnixMicro()
	sh, _, k := m.locate(req)
	p := algo.ParamsOf(req)
	sh.mu.Lock()
	st := sh.state(k, now)
	_, r := algo.For(req.Limit.Algorithm)(st, now, p)
	sh.mu.Unlock()
	d := decisionOf(r, now)
	d.Debt = algo.Debt(req.Limit.Algorithm, st, now, p)
	return d, nil
}

// Reset forgets req's Key under req's algorithm: a full bucket or an empty
// window again. Request ids it admitted are still remembered.
func (m *Memory) Reset(ctx context.Context, req tollgate.Request) error {
	req, err := begin(ctx, req)
	if err != nil {
		return err
	}
	sh, _, k := m.locate(req)
	sh.mu.Lock()
	sh.remove(k)
	sh.mu.Unlock()
	return nil
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

// begin returns req normalized, or ctx's error when ctx is done.
func begin(ctx context.Context, req tollgate.Request) (tollgate.Request, error) {
	if err := ctx.Err(); err != nil {
		return req, err
	}
	return check.Normalize(req)
}

// member is one request of a set being decided (an AllowAll set, or the
// one request of an Allow): where its state lives, the state its judgment
// leaves, and its answer.
type member struct {
	sh     *memShard
	shard  int // sh's index in Memory.shards
	state  memKey
	alg    algo.Func
	p      algo.Params
	marker *entry // its request id's live marker, when the set replays
	after  algo.State
	ttl    int64 // ms: how long after now the state matters
	d      tollgate.Decision
}

// decide is lua/decide.lua for reqs (normalized, one request id or none), with
// set[i] for reqs[i]: request-id replay, then each algorithm in order, then
// the writes of an admission, every marker living replayTTL (a ReplayTTL;
// 0 for the store's). The set's shards are locked for the whole decision.
func (m *Memory) decide(reqs []tollgate.Request, set []member, replayTTL time.Duration) {
	now := m.clock().UnixMicro()
	for i, req := range reqs {
		set[i].sh, set[i].shard, set[i].state = m.locate(req)
		set[i].alg, set[i].p = algo.For(req.Limit.Algorithm), algo.ParamsOf(req)
	}
	m.lock(set)
	for i := range set {
		set[i].sh.reclaim(now)
	}
	requestID := reqs[0].RequestID
	withID := m.replays.max > 0 && requestID != ""
	switch {
	case withID && m.replay(set, requestID, now):
	case judge(set, now):
		var markerTTL int64
		if withID {
			markerTTL = m.replays.ttlMsFor(replayTTL) * 1000
		}
		for i := range set {
			set[i].sh.put(set[i].state, set[i].after, now, set[i].ttl)
			if withID {
				set[i].sh.mark(set[i].state.marker(requestID), now, markerTTL)
			}
		}
	}
	m.unlock(set)
	m.sweep(set[0].sh, now)
}

// sweep reclaims expired entries of one other shard than sh, in turn, so
// that they are reclaimed even in shards no decision lands on any more.
func (m *Memory) sweep(sh *memShard, now int64) {
	if len(m.shards) > 1 {
		o := &m.shards[m.next.Add(1)%uint64(len(m.shards))]
		if o != sh && o.mu.TryLock() {
			o.reclaim(now)
			o.mu.Unlock()
		}
	}
}

// replay answers the set as a replay when every member's marker for
// requestID holds an admission with replays left, counting one replay on
// each marker (members on one state share it), and reports whether it did.
// A replay debits nothing: each member answers its state as it is.
func (m *Memory) replay(set []member, requestID string, now int64) bool {
	for i := range set {
		e := set[i].sh.live(set[i].state.marker(requestID), now)
		if e == nil || e.count >= m.replays.max {
			return false
		}
		set[i].marker = e
	}
	for i := range set {
		if earlier(set, i) < 0 {
			set[i].marker.count++
		}
		p := set[i].p
		p.Cost = 0
		_, r := set[i].alg(set[i].sh.state(set[i].state, now), now, p)
		set[i].d = replayOf(r, now)
	}
	return true
}

// judge runs each member's algorithm, in order, on the state the members
// before it on the same state left, so that they see each other's debits,
// and reports whether every one admitted; when one did not, every member
// answers a denial.
func judge(set []member, now int64) bool {
	all := true
	for i := range set {
		var st algo.State
		if j := earlier(set, i); j >= 0 {
			st = set[j].after
		} else {
			st = set[i].sh.state(set[i].state, now)
		}
		var r algo.Result
		set[i].after, r = set[i].alg(st, now, set[i].p)
		set[i].ttl, set[i].d = r.TTL, decisionOf(r, now)
		all = all && r.Allowed
	}
	if !all {
		for i := range set {
			set[i].d.Allowed = false
		}
	}
	return all
}

// earlier returns the last member before set[i] on the same state, or -1.
func earlier(set []member, i int) int {
	for j := i - 1; j >= 0; j-- {
		if set[j].state == set[i].state {
			return j
		}
	}
	return -1
}

// decisionOf is the Decision of an algorithm's result r at now (µs).
func decisionOf(r algo.Result, now int64) tollgate.Decision {
	return tollgate.Decision{
		Allowed:    r.Allowed,
		Remaining:  r.Remaining,
		RetryAfter: micros(r.RetryAfter),
		ResetAfter: micros(r.ResetAfter),
		Debt:       r.Debt,
		At:         time.UnixMicro(now),
	}
}

// replayOf is the Decision replaying an admission on the state r read with
// cost 0: admitted, not debited again, with that state's Remaining and
// ResetAfter.
func replayOf(r algo.Result, now int64) tollgate.Decision {
	return tollgate.Decision{Allowed: true, Remaining: r.Remaining, ResetAfter: micros(r.ResetAfter), Replayed: true, At: time.UnixMicro(now)}
}

// locate returns the shard of a normalized request, its index and the name
// of its state entry.
func (m *Memory) locate(req tollgate.Request) (*memShard, int, memKey) {
	identity, hashed := req.Key, false
	if len(identity) > maxRawIdentity {
		sum := sha256.Sum256([]byte(identity))
		identity, hashed = string(sum[:]), true
	}
	k := memKey{algorithm: req.Limit.Algorithm, hashed: hashed, identity: identity}
	i := int(maphash.String(m.seed, req.Key) % uint64(len(m.shards)))
	return &m.shards[i], i, k
}

// lock locks each distinct shard of set once, in the order of m.shards, so
// that concurrent sets cannot deadlock.
func (m *Memory) lock(set []member) {
	for last := -1; ; {
		next := -1
		for i := range set {
			if s := set[i].shard; s > last && (next < 0 || s < next) {
				next = s
			}
		}
		if next < 0 {
			return
		}
		m.shards[next].mu.Lock()
		last = next
	}
}

// unlock unlocks what lock locked.
func (m *Memory) unlock(set []member) {
	for i := range set {
		first := true
		for j := range i {
			first = first && set[j].shard != set[i].shard
		}
		if first {
			set[i].sh.mu.Unlock()
		}
	}
}

// DecidesInProcess reports true: the Memory store never waits on a network
// (tollgate.InProcess).
func (m *Memory) DecidesInProcess() bool { return true }
