package region

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
)

// MemoryHome is a Home in process, for tests and examples: the regions
// sharing it are Regions of one process. It keeps the same holdings as
// RedisHome's script and answers the same, on its own clock.
type MemoryHome struct {
	now     func() time.Time
	mu      sync.Mutex
	keys    map[string]*memoryKey
	reports int // since the last sweep of every key
}

// memorySweepEvery is how many reports pass between two sweeps of every
// key, which drop the keys whose holdings have all ended.
const memorySweepEvery = 1024

// memoryKey is one identity and limit: the script's hash.
type memoryKey struct {
	config   string
	holdings map[string]holding
}

var _ Home = (*MemoryHome)(nil)

// NewMemoryHome returns an empty Home in process reading the clock now
// (time.Now when nil).
func NewMemoryHome(now func() time.Time) *MemoryHome {
	if now == nil {
		now = time.Now
	}
	return &MemoryHome{now: now, keys: make(map[string]*memoryKey)}
}

// Report records and answers each report as the Redis Home's script does.
func (m *MemoryHome) Report(ctx context.Context, reports []Report) ([]Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	replies := make([]Reply, len(reports))
	for i, r := range reports {
		replies[i] = m.report(r)
	}
	if m.reports += len(reports); m.reports >= memorySweepEvery {
		m.reports = 0
		now := m.now().UnixMicro()
		for hk := range m.keys {
			if len(m.live(hk, now).holdings) == 0 {
				delete(m.keys, hk)
			}
		}
	}
	return replies, nil
}

// report is the script's report, on the key of r.
func (m *MemoryHome) report(r Report) Reply {
	nowT := m.now()
	now := nowT.UnixMicro()
	k := m.live(homeKey("", r.Key, r.Limit), now)
	config := homeConfig(r)
	if k.config != "" && k.config != config {
		return Reply{At: nowT, Err: ErrDisagree}
	}
	held, seen := int64(0), 0
	var others []Holding
	mine, haveMine := k.holdings[r.Region]
	for _, name := range sortedNames(k.holdings) {
		if name == r.Region {
			continue
		}
		h := k.holdings[name]
		if h.window > r.Window+1 {
			return Reply{At: nowT, Err: ErrStale}
		}
		inWindow := r.Floor
		switch h.window {
		case r.Window:
			inWindow = h.share
		case r.Window + 1:
			inWindow = h.previous
		}
		held += max(r.Floor, inWindow)
		seen++
		others = append(others, h.public(name, now))
	}
	if seen >= r.Regions {
		return Reply{At: nowT, Err: ErrDisagree}
	}
	if haveMine && mine.window > r.Window {
		return Reply{At: nowT, Err: ErrStale}
	}
	granted := max(r.Floor, min(r.Want, r.Limit.Rate-held-int64(r.Regions-1-seen)*r.Floor))
	previous := r.Floor
	switch {
	case haveMine && mine.window == r.Window:
		previous = mine.previous
	case haveMine && mine.window == r.Window-1:
		previous = mine.share
	}
	k.holdings[r.Region] = holding{window: r.Window, share: granted, until: now + r.Keep.Microseconds(), demand: r.Demand, used: r.Used, previous: previous}
	k.config = config
	return Reply{Granted: granted, At: nowT, Others: others}
}

// live returns key's holdings at now, those whose until has passed
// dropped (and the key's configuration with the last of them).
func (m *MemoryHome) live(key string, now int64) *memoryKey {
	k := m.keys[key]
	if k == nil {
		k = &memoryKey{holdings: make(map[string]holding)}
		m.keys[key] = k
	}
	for name, h := range k.holdings {
		if h.until <= now {
			delete(k.holdings, name)
		}
	}
	if len(k.holdings) == 0 {
		k.config = ""
	}
	return k
}

// Look returns the holdings of key under limit, as the script's look.
func (m *MemoryHome) Look(ctx context.Context, key string, limit tollgate.Limit) ([]Holding, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	nowT := m.now()
	now := nowT.UnixMicro()
	hk := homeKey("", key, normalize(limit))
	k := m.live(hk, now)
	var out []Holding
	for _, name := range sortedNames(k.holdings) {
		out = append(out, k.holdings[name].public(name, now))
	}
	if len(k.holdings) == 0 {
		delete(m.keys, hk)
	}
	return out, nowT, nil
}

// sortedNames returns the regions holding, in order, so that answers do
// not depend on map order.
func sortedNames(hs map[string]holding) []string {
	names := make([]string, 0, len(hs))
	for n := range hs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
