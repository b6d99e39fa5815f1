package store

import (
	"context"
	"sync"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fairshare"
)

// memShares holds a Memory store's shared limits: by key, the members'
// reports, as the share script keeps them in a hash.
type memShares struct {
	mu    sync.Mutex
	keys  map[string]map[string]memShare
	calls int // Share calls since the last sweep of every key
}

// memShare is one member's report: the share script's "demand granted
// expires_us".
type memShare struct {
	demand, granted, expires int64
}

// shareSweepEvery is how many Share calls pass between two sweeps of every
// key, which drop the keys whose members have all left.
const shareSweepEvery = 1024

var _ tollgate.ShareStore = (*Memory)(nil)

// Share records s.Member's demand on s.Key and grants it its share (see
// tollgate.ShareStore), as the share script does on Redis.
func (m *Memory) Share(ctx context.Context, s tollgate.Share) (tollgate.ShareGrant, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.ShareGrant{}, err
	}
	if err := s.Validate(); err != nil {
		return tollgate.ShareGrant{}, err
	}
	now := m.clock().UnixMicro()
	ms := &m.shares
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.keys == nil {
		ms.keys = make(map[string]map[string]memShare)
	}
	if ms.calls++; ms.calls >= shareSweepEvery {
		ms.calls = 0
		for k, members := range ms.keys {
			if sweepShares(members, now) == 0 {
				delete(ms.keys, k)
			}
		}
	}
	members := ms.keys[s.Key]
	sweepShares(members, now)
	var others []int64
	held := int64(0)
	for name, sh := range members {
		if name != s.Member {
			others = append(others, sh.demand)
			held += sh.granted
		}
	}
	if len(others) >= tollgate.MaxShareMembers {
		return tollgate.ShareGrant{Members: len(others)}, nil
	}
	fair := fairshare.Of(s.Limit, others, s.Demand)
	granted := max(0, min(fair, s.Limit-held))
	if members == nil {
		members = make(map[string]memShare)
		ms.keys[s.Key] = members
	}
	members[s.Member] = memShare{demand: s.Demand, granted: granted, expires: now + s.TTL.Microseconds()}
	return tollgate.ShareGrant{Granted: granted, Fair: fair, Members: len(others) + 1}, nil
}

// sweepShares drops the members whose report expired and returns how many
// are left.
func sweepShares(members map[string]memShare, now int64) int {
	for name, sh := range members {
		if sh.expires <= now {
			delete(members, name)
		}
	}
	return len(members)
}
