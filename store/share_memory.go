package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fairshare"
)

// memShares holds a Memory store's shared limits as the share script
// keeps them on Redis (lua/doc.go): by key, the members, the groups' use
// of a window and the configuration; by slot, the mark of the store's
// memory.
type memShares struct {
	mu    sync.Mutex
	keys  map[string]*memShareKey
	marks map[int]memMark
	calls int // Share calls since the last sweep of every key
}

// memShareKey is one shared limit: the script's hash, which expires (µs)
// as the script's PEXPIRE says.
type memShareKey struct {
	config  *memShareConfig
	members map[string]memMember
	groups  map[string]*memGroupUse
	expires int64
}

// memShareConfig is the hash's "#": what every report must agree on, and
// when the key was made.
type memShareConfig struct {
	groups       int
	floor, limit int64
	born         int64
}

// memMember is a member's field: "seq window share until demand group".
type memMember struct {
	seq, window, share, until, demand int64
	group                             string // "" for itself
}

// groupOf is the group m counts in: its own name when it has none.
func (m memMember) groupOf(name string) string {
	if m.group == "" {
		return name
	}
	return m.group
}

// memGroupUse is a group's field of a window: "window bound used before
// until".
type memGroupUse struct {
	window, bound, used, before, until int64
	dirty                              bool
}

// memMark is a slot's mark: when the store's memory of it began, and how
// long the mark lives. In process the memory is lost only with the store
// (or forget, in tests), so the server process never changes.
type memMark struct{ born, until int64 }

// shareSweepEvery is how many Share calls pass between two sweeps of every
// key, which drop the keys whose members and groups have all left.
const shareSweepEvery = 1024

var _ tollgate.ShareStore = (*Memory)(nil)

// Share records s.Member's demand on s.Key and grants it its share (see
// tollgate.ShareStore), as the share script does on Redis.
func (m *Memory) Share(ctx context.Context, s tollgate.Share) (tollgate.ShareGrant, error) {
	gs, err := m.ShareAll(ctx, []tollgate.Share{s})
	if err != nil {
		return tollgate.ShareGrant{}, err
	}
	return gs[0], nil
}

// ShareAll is Share of every report, in order. An invalid report fails
// them all before any is recorded.
func (m *Memory) ShareAll(ctx context.Context, shares []tollgate.Share) ([]tollgate.ShareGrant, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, s := range shares {
		if err := s.Validate(); err != nil {
			return nil, err
		}
	}
	ms := &m.shares
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make([]tollgate.ShareGrant, len(shares))
	for i, s := range shares {
		now := m.clock().UnixMicro()
		ms.sweep(now)
		out[i] = ms.report(s, now)
	}
	return out, nil
}

// LookShare answers what Share would see of key's groups in window,
// writing nothing, as Redis.LookShare.
func (m *Memory) LookShare(ctx context.Context, key string, window int64, lease time.Duration) (tollgate.ShareGrant, error) {
	if err := ctx.Err(); err != nil {
		return tollgate.ShareGrant{}, err
	}
	if len(key) > tollgate.MaxKeyLen || window < 0 || lease < 0 {
		return tollgate.ShareGrant{}, fmt.Errorf("%w: look share: a key of at most %d bytes, a window and a lease of 0 or more", tollgate.ErrInvalidRequest, tollgate.MaxKeyLen)
	}
	ms := &m.shares
	ms.mu.Lock()
	defer ms.mu.Unlock()
	now := m.clock().UnixMicro()
	born := now
	if mk, ok := ms.marks[shareSlot(key)]; ok && mk.until > now {
		born = mk.born
	}
	v := ms.read(key, now, "", window)
	v.aggregate("", 0)
	for g, u := range v.groups {
		b, used := u.about(window)
		o := v.other(g)
		o.Share, o.Used = max(o.Share, b), used
	}
	return v.grant(0, 0, v.total, now, max(0, born+lease.Microseconds()-now)), nil
}

// sweep drops, every shareSweepEvery calls, the keys that hold nothing
// live and the marks that ended.
func (ms *memShares) sweep(now int64) {
	if ms.keys == nil {
		ms.keys = make(map[string]*memShareKey)
		ms.marks = make(map[int]memMark)
	}
	if ms.calls++; ms.calls < shareSweepEvery {
		return
	}
	ms.calls = 0
	for name, k := range ms.keys {
		if k.expires <= now {
			delete(ms.keys, name)
		}
	}
	for slot, mk := range ms.marks {
		if mk.until <= now {
			delete(ms.marks, slot)
		}
	}
}

// forget loses everything, as a Redis restarted empty or flushed.
func (ms *memShares) forget() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.keys, ms.marks = nil, nil
}

// shareView is a key as the script reads it at now for one member: the
// live members and groups, the expired set apart, the other groups.
type shareView struct {
	key               *memShareKey
	live, gone        map[string]memMember
	groups            map[string]*memGroupUse
	mine              *memMember
	others            []*tollgate.ShareHolding
	by                map[string]*tollgate.ShareHolding
	mycount, mydemand int64
	total             int
	mygroup, me       string
	window, now       int64
	expiredGroups     []string
	forgottenConfig   bool
}

// read is the script's reading of key for member (of mygroup, demanding
// demand) at now in window.
func (ms *memShares) read(key string, now int64, member string, window int64) *shareView {
	k := ms.keys[key]
	if k == nil || k.expires <= now {
		k = &memShareKey{members: map[string]memMember{}, groups: map[string]*memGroupUse{}}
	}
	v := &shareView{key: k, live: map[string]memMember{}, gone: map[string]memMember{}, groups: map[string]*memGroupUse{},
		by: map[string]*tollgate.ShareHolding{}, me: member, window: window, now: now}
	for name, mb := range k.members {
		if mb.until > now {
			v.live[name] = mb
		} else {
			v.gone[name] = mb
		}
	}
	for g, u := range k.groups {
		if u.until > now {
			c := *u
			v.groups[g] = &c
		} else {
			v.expiredGroups = append(v.expiredGroups, g)
		}
	}
	return v
}

// other returns the holding of group g, made on first use.
func (v *shareView) other(g string) *tollgate.ShareHolding {
	o := v.by[g]
	if o == nil {
		o = &tollgate.ShareHolding{Group: g}
		v.by[g] = o
		v.others = append(v.others, o)
	}
	return o
}

// aggregate sums the live members by group: the caller's group apart.
func (v *shareView) aggregate(mygroup string, demand int64) {
	v.mygroup, v.mydemand = mygroup, demand
	for _, name := range sortedKeys(v.live) {
		mb := v.live[name]
		if name == v.me {
			c := mb
			v.mine = &c
			continue
		}
		v.total++
		share := int64(0)
		if mb.window == v.window {
			share = mb.share
		}
		if g := mb.groupOf(name); g == mygroup {
			v.mycount, v.mydemand = max(v.mycount, share), v.mydemand+mb.demand
		} else {
			o := v.other(g)
			o.Share, o.Demand, o.Members = max(o.Share, share), o.Demand+mb.demand, o.Members+1
			o.Left = max(o.Left, time.Duration(mb.until-v.now)*time.Microsecond)
		}
	}
}

// about is what u says of window: its bound and its use.
func (u *memGroupUse) about(window int64) (bound, used int64) {
	switch u.window {
	case window:
		return u.bound, u.used
	case window + 1:
		return u.before, u.before
	}
	return 0, 0
}

// fold folds a ceiling v (and a use) in window w into group g's record.
func (v *shareView) fold(g string, w, share, used int64) {
	u := v.groups[g]
	if u == nil {
		u = &memGroupUse{window: w}
		v.groups[g] = u
	}
	switch {
	case w == u.window:
		u.bound, u.used = max(u.bound, share), max(u.used, used)
	case w == u.window-1:
		u.before = max(u.before, share)
	case w > u.window:
		if w == u.window+1 {
			u.before = u.bound
		} else {
			u.before = 0
		}
		u.window, u.bound, u.used = w, share, used
	default:
		return
	}
	u.dirty = true
}

// grant is the reply: the header and the other groups by name.
func (v *shareView) grant(granted, fair int64, members int, now, settling int64) tollgate.ShareGrant {
	g := tollgate.ShareGrant{Granted: granted, Fair: fair, Members: members, At: time.UnixMicro(now), Settling: time.Duration(settling) * time.Microsecond}
	slices.SortFunc(v.others, func(a, b *tollgate.ShareHolding) int { return cmp.Compare(a.Group, b.Group) })
	for _, o := range v.others {
		g.Others = append(g.Others, *o)
	}
	return g
}

func refused(now int64, err error) tollgate.ShareGrant {
	return tollgate.ShareGrant{At: time.UnixMicro(now), Refused: err}
}

// report is the share script's report (lua/doc.go), step by step.
func (ms *memShares) report(s tollgate.Share, now int64) tollgate.ShareGrant {
	lease := s.TTL.Microseconds()
	mygroup := s.Group
	if mygroup == "" {
		mygroup = s.Member
	}
	born, fresh, settling := now, false, int64(0)
	slot := shareSlot(s.Key)
	if s.Groups > 0 {
		if mk, ok := ms.marks[slot]; ok && mk.until > now {
			born = mk.born
		} else {
			fresh = true
		}
		settling = max(0, born+lease-now)
	}
	v := ms.read(s.Key, now, s.Member, s.Window)
	v.aggregate(mygroup, s.Demand)

	kborn := now
	if c := v.key.config; s.Groups > 0 && c != nil {
		if c.groups != s.Groups || c.floor != s.Floor || c.limit != s.Limit {
			return refused(now, tollgate.ErrShareDisagree)
		}
		kborn = c.born
	}
	if s.Seq > 0 && v.mine != nil && v.mine.seq >= s.Seq {
		return refused(now, tollgate.ErrShareLate)
	}
	if s.Window > 0 {
		if v.mine != nil && v.mine.window > s.Window {
			return refused(now, tollgate.ErrShareStale)
		}
		for name, mb := range v.live {
			if mb.groupOf(name) != mygroup && mb.window > s.Window+1 {
				return refused(now, tollgate.ErrShareStale)
			}
		}
		for g, u := range v.groups {
			if g != mygroup && u.window > s.Window+1 {
				return refused(now, tollgate.ErrShareStale)
			}
		}
	}
	if v.total >= tollgate.MaxShareMembers {
		return tollgate.ShareGrant{Members: v.total, At: time.UnixMicro(now)}
	}
	for _, name := range sortedKeys(v.gone) {
		if mb := v.gone[name]; mb.window > 0 {
			v.fold(mb.groupOf(name), mb.window, mb.share, 0)
		}
	}
	myused := s.Used
	for _, g := range sortedKeys(v.groups) {
		b, used := v.groups[g].about(s.Window)
		if g == mygroup {
			v.mycount, myused = max(v.mycount, b), max(myused, used)
		} else {
			o := v.other(g)
			o.Share, o.Used = max(o.Share, b), used
		}
	}
	if s.Groups > 0 && len(v.others) >= s.Groups {
		return refused(now, tollgate.ErrShareDisagree)
	}

	fair := shareFair(s, v, myused, now < kborn+lease)
	unknown := 0
	if s.Groups > 0 {
		unknown = s.Groups - 1 - len(v.others)
	}
	held := int64(unknown) * s.Floor
	for _, o := range v.others {
		held += max(s.Floor, o.Share)
	}
	granted := max(s.Floor, min(fair, s.Limit-held))
	if d := granted - v.mycount; s.Groups > 0 && v.mycount > 0 && max(d, -d) <= max(1, v.mycount/64) {
		granted = max(s.Floor, min(v.mycount, s.Limit-held)) // what its group's others hold (lua/doc.go)
	}
	if settling > 0 {
		granted = min(granted, max(s.Floor, s.Hold))
	}

	k := v.key
	ms.keys[s.Key] = k
	for name := range v.gone {
		delete(k.members, name)
	}
	for _, g := range v.expiredGroups {
		delete(k.groups, g)
	}
	if s.Window > 0 {
		if v.mine != nil && v.mine.window < s.Window {
			v.fold(mygroup, v.mine.window, v.mine.share, 0)
		}
		v.fold(mygroup, s.Window, s.Used, s.Used)
	}
	k.members[s.Member] = memMember{seq: s.Seq, window: s.Window, share: max(granted, s.Hold), until: now + lease, demand: s.Demand, group: s.Group}
	for g, u := range v.groups {
		if u.dirty {
			u.until = max(u.until, now+s.WindowTTL.Microseconds())
			u.dirty = false
			k.groups[g] = u
		}
	}
	last := now + lease
	for _, mb := range v.live {
		last = max(last, mb.until)
	}
	for _, u := range k.groups {
		last = max(last, u.until)
	}
	ttl := (last-now+999)/1000 + 1 // the script's PEXPIRE, ms
	k.expires = now + ttl*1000
	if s.Groups > 0 {
		k.config = &memShareConfig{groups: s.Groups, floor: s.Floor, limit: s.Limit, born: kborn}
		need := max(ttl, 86_400_000) // the mark's PX, ms: at least a day
		if fresh {
			ms.marks[slot] = memMark{born: born, until: now + need*1000}
		} else if mk := ms.marks[slot]; (mk.until-now)/1000 < need/2 {
			ms.marks[slot] = memMark{born: mk.born, until: now + need*1000}
		}
	}
	return v.grant(granted, fair, v.total+1, now, settling)
}

// shareFair is the fair share of s's group (lua/doc.go): of a rate, the
// floor plus its water-filled part of what the floors leave; of a window,
// its use plus its water-filled part of what the uses leave. While the
// key is young, each group not heard of asks an equal split of a rate, or
// as much as the caller of a window.
func shareFair(s tollgate.Share, v *shareView, myused int64, young bool) int64 {
	unknown := 0
	if s.Groups > 0 && young {
		unknown = s.Groups - 1 - len(v.others)
	}
	asks := make([]int64, 0, len(v.others)+unknown)
	if s.Window == 0 {
		pool := s.Limit - int64(s.Groups)*s.Floor
		for _, o := range v.others {
			asks = append(asks, max(0, o.Demand-s.Floor))
		}
		for range unknown {
			asks = append(asks, pool/int64(s.Groups))
		}
		return s.Floor + fairshare.Of(pool, asks, max(0, v.mydemand-s.Floor))
	}
	base := max(s.Floor, myused)
	taken, want := base, v.mydemand
	if s.Groups > 0 {
		taken += int64(s.Groups-1-len(v.others)) * s.Floor
	}
	for _, o := range v.others {
		taken += max(s.Floor, o.Used)
		asks = append(asks, o.Demand)
		want += o.Demand
	}
	for range unknown {
		asks = append(asks, v.mydemand)
		want += v.mydemand
	}
	return min(s.Limit, base+fairshare.Of(min(max(0, s.Limit-taken), 2*want), asks, v.mydemand))
}

// sortedKeys returns m's keys in order, so that the mirror's sums and
// folds run in one order whatever the map's.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
