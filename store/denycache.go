package store

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
)

// DefaultDenyCacheSize is how many denials a Redis store remembers unless
// WithDenyCache says otherwise: about 4096 × 64 bytes of memory.
const DefaultDenyCacheSize = 4096

// MaxDenyCacheTTL is the longest a denial is repeated from memory, however
// long Redis said to wait: a key deleted by hand, or a Redis that lost its
// data, is noticed within it.
const MaxDenyCacheTTL = 10 * time.Second

// WithDenyCache sets how many denials the store remembers in process
// (rounded up to a multiple of denyWays; default DefaultDenyCacheSize); 0
// turns the cache off.
//
// When Redis denies a request with "retry after d", the store repeats that
// denial from memory, without a round trip, for requests with the same Key,
// Limit and a Cost at least as large, until d has passed (at most
// MaxDenyCacheTTL). It never denies what Redis would admit:
//
//   - d is counted from before the request was sent, on the monotonic
//     clock, less 1/1024 of d for a Redis clock running fast; Redis counted
//     it from when the script ran, later. Nothing but other requests'
//     debits changes what a cost needs before then, and those only delay it.
//   - a smaller cost, which may fit, goes to Redis;
//   - a request carrying a RequestID always goes to Redis: it may replay an
//     earlier admission.
//
// A repeated denial reports the Remaining of the denial it repeats (a
// lower bound: the bucket may have refilled a little since), and the
// RetryAfter and ResetAfter left of that denial's.
//
// Only denied identities enter the cache, and an identity is denied only
// after it used its quota, so fresh identities never push entries out. The
// cache is sharded; within a shard an entry is replaced only when it has
// expired or, when none has, the one that saved the fewest round trips, so
// a flood of denied identities cannot push out a hot identity's entry,
// which saves one round trip per request.
func WithDenyCache(size int) RedisOption {
	return func(r *Redis) {
		r.deny = nil
		if size > 0 {
			r.deny = newDenyCache(size)
		}
	}
}

// denyWays is the number of entries in one shard: a lookup compares at most
// this many under the shard's lock.
const denyWays = 8

// denyKey identifies one identity under one limit: a 128-bit hash of the
// Key and the Limit with two seeds random to the process, so no caller can
// aim two identities at one key (two distinct identities share one with
// probability 2^-128).
type denyKey struct{ a, b uint64 }

type denyEntry struct {
	key denyKey
	// cost is the smallest cost denied: costs at least this are denied.
	cost int64
	// expires, retryAt and resetAt are monotonic nanoseconds since the
	// cache's epoch; expires ≤ retryAt.
	expires, retryAt, resetAt int64
	remaining                 int64
	// hits counts the round trips the entry saved.
	hits uint32
	used bool
}

type denyShard struct {
	mu      sync.Mutex
	entries [denyWays]denyEntry
	_       [64]byte // keeps neighbouring shards' locks off one cache line
}

type denyCache struct {
	seedA, seedB maphash.Seed
	epoch        time.Time // carries the monotonic clock reading
	shards       []denyShard
	mask         uint64
}

func newDenyCache(size int) *denyCache {
	n := 1
	for n*denyWays < size {
		n <<= 1
	}
	return &denyCache{
		seedA:  maphash.MakeSeed(),
		seedB:  maphash.MakeSeed(),
		epoch:  time.Now(),
		shards: make([]denyShard, n),
		mask:   uint64(n - 1),
	}
}

// limitKey is what a denial is about besides the identity.
type limitKey struct {
	key   string
	limit tollgate.Limit
}

func (dc *denyCache) key(identity string, l tollgate.Limit) denyKey {
	k := limitKey{identity, l}
	return denyKey{maphash.Comparable(dc.seedA, k), maphash.Comparable(dc.seedB, k)}
}

// now is the monotonic time since the cache's epoch.
func (dc *denyCache) now() int64 { return int64(time.Since(dc.epoch)) }

// lookup returns the remembered denial for a request of cost under k, if
// one is still in force.
func (dc *denyCache) lookup(k denyKey, cost int64) (tollgate.Decision, bool) {
	s := &dc.shards[k.a&dc.mask]
	now := dc.now()
	s.mu.Lock()
	for i := range s.entries {
		e := &s.entries[i]
		if !e.used || e.key != k {
			continue
		}
		if now >= e.expires || cost < e.cost {
			break
		}
		if e.hits < ^uint32(0) {
			e.hits++
		}
		d := tollgate.Decision{
			Remaining:  e.remaining,
			RetryAfter: time.Duration(e.retryAt - now),
			ResetAfter: time.Duration(max(e.resetAt-now, 0)),
		}
		s.mu.Unlock()
		return d, true
	}
	s.mu.Unlock()
	return tollgate.Decision{}, false
}

// insert remembers that Redis denied cost under k with d, for a request
// sent at sent (monotonic nanoseconds since the epoch, from dc.now).
func (dc *denyCache) insert(k denyKey, cost int64, sent int64, d tollgate.Decision) {
	wait := int64(d.RetryAfter)
	expires := sent + min(wait-wait>>10, int64(MaxDenyCacheTTL))
	if wait <= 0 || expires <= dc.now() {
		return
	}
	e := denyEntry{
		key: k, cost: cost, used: true,
		expires: expires, retryAt: sent + wait, resetAt: sent + int64(d.ResetAfter),
		remaining: d.Remaining,
	}
	s := &dc.shards[k.a&dc.mask]
	now := dc.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	victim := -1
	for i := range s.entries {
		old := &s.entries[i]
		if old.used && old.key == k {
			// A live entry for a smaller cost covers more requests: keep it.
			if now < old.expires && old.cost < cost {
				return
			}
			e.hits = old.hits
			*old = e
			return
		}
		switch {
		case !old.used || now >= old.expires:
			if victim < 0 || s.entries[victim].used && now < s.entries[victim].expires {
				victim = i
			}
		case victim < 0 || s.entries[victim].used && now < s.entries[victim].expires && old.hits < s.entries[victim].hits:
			victim = i
		}
	}
	s.entries[victim] = e
}
