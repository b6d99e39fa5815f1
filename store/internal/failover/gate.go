package failover

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrServerChanged is the error of a call that a new connection found
// going to another server than the one its gate verified (a promoted
// replica behind the same address, a restart): the connection is closed
// before the call is written, so nothing of it ran, and it may be sent
// again once the gate has verified the new server.
var ErrServerChanged = errors.New("tollgate: the server behind the address changed: the call was not sent")

// ErrNotPrimary is the error of a call whose gate found its server to be a
// replica: nothing was sent, and the call may be sent again once the
// client's routing names the new primary.
var ErrNotPrimary = errors.New("tollgate: the server is not a primary: the call was not sent")

// Restorer restores journaled writes.
type Restorer interface {
	// Restore applies entries, each on the primary serving its key now,
	// with calls sent under ctx (which lets them past the gate that is
	// verifying that primary, see Gate); it journals what it applied in
	// the era it was stamped with, and returns how many entries were
	// applied and how many the primaries held already. On an error the
	// entries' fate is unknown only for the calls that failed: Restore
	// returns those entries, for the caller to keep.
	Restore(ctx context.Context, entries []Entry) (applied, held int, failed []Entry, err error)
}

// Exactness says when a gate stamps its calls (see Gate).
type Exactness uint8

const (
	// WhenReplicated stamps while the primary has a replica that could
	// take over (or had one within the grace), and stamps nothing
	// otherwise.
	WhenReplicated Exactness = iota
	// Always stamps, replica or not.
	Always
)

// GateConfig is what a gate needs: the primary it stands before, the
// journal and restorer of its client, how it reads its server and finds a
// command's era, and when it is exact.
type GateConfig struct {
	// Node is the address the gate stands before; "" for the one server of
	// a single node or Sentinel client.
	Node     string
	Journal  *Journal
	Restorer Restorer
	// Info reads INFO replication of the gate's server (with its Cluster
	// replicas, on a Cluster node).
	Info func(ctx context.Context) (ReplInfo, error)
	// Stamped says where a command's era goes: its index in the command's
	// arguments, and whether it carries one at all.
	Stamped func(args []any) (int, bool)
	// Exactness says when the gate stamps; Grace how long a primary that
	// had a replica stays exact once it has none (WhenReplicated).
	Exactness Exactness
	Grace     time.Duration
	// OnCall, when set, is called as each call enters (the watcher's
	// sign that the store is in use).
	OnCall func()
	// Now is the clock the grace is counted on; nil for time.Now.
	Now func() time.Time
}

// A Gate stands before one primary (see the package doc). Its hooks go on
// the go-redis client of that primary: the client of a single node or a
// Sentinel set, or each node's client of a Cluster client.
//
// An epoch of the gate is exact or not. An exact epoch stamps every call
// with its era: the scripts write the lineage, the store journals the
// writes. An epoch that is not stamps the empty era: no lineage, no
// journal, nothing but the gate's own bookkeeping per call. With
// WhenReplicated, an epoch is exact when the verification that made it
// saw a replica of the primary (INFO replication's connected replicas, a
// Cluster node's replicas), or saw none but the gate saw one within the
// grace; the watcher ends the epoch when the replicas it reads say
// otherwise, and the next verification decides again.
type Gate struct {
	node     string
	journal  *Journal
	restorer Restorer
	info     func(ctx context.Context) (ReplInfo, error)
	stamped  func(args []any) (int, bool)
	mode     Exactness
	grace    time.Duration
	onCall   func()
	now      func() time.Time

	cur  atomic.Pointer[epoch]
	last string // the era verified last (each verification runs after the last ended)
	// changedTo is the era the last primary change counted went to: a
	// verification of the same primary again (its epoch ended by a change
	// of exactness, a lost connection, a failed restore) counts nothing.
	changedTo string

	// runMu guards runs, the verifications under way, and idle, closed
	// when runs falls to zero: Wait reads them (a WaitGroup's Wait may not
	// meet a first Add, and a verification may start at any time).
	runMu sync.Mutex
	runs  int
	idle  chan struct{}
	// replicated is when the gate last saw its primary with a replica
	// (UnixNano; 0: never).
	replicated atomic.Int64

	// Changes counts verifications that found a primary replacing another
	// era (a failover, a restart, a primary's first replica: Redis starts
	// a new replication id with its backlog); modes the epochs whose
	// exactness differs from the one before.
	changes, modes atomic.Int64

	// OnBlind, when set before the gate is used, is called when the
	// server refuses INFO (an ACL without it): the gate then stamps
	// nothing, and the store keeps no journal of the writes through it.
	OnBlind func(error)
	// OnMode, when set before the gate is used, is called when a
	// verification puts in force an epoch of a server not verified just
	// before (the first verification included) or whose exactness differs
	// from the one before it, with the replicas it read and the primary's
	// replication offset at that point.
	OnMode func(exact bool, inf ReplInfo)
}

// eraNone is the era a call is stamped with in an epoch that is not
// exact: the scripts write no lineage.
var eraNone any = ""

// epoch is a period during which a gate's primary is one server: its era,
// boxed once for stamping (eraNone when the epoch is not exact);
// unverified until the gate has read it.
type epoch struct {
	verified bool
	exact    bool
	era      any // string
	name     string
	replid   string
	// prev is the epoch this one replaced: no call is verified under this
	// one before every call stamped under prev has ended. Set once, when
	// the epoch is made: Check reads it from connections' goroutines.
	prev     *epoch
	inflight atomic.Int64
	retired  atomic.Bool
	drained  chan struct{}
	once     sync.Once
	// An unverified epoch's verification: started once, ready when it
	// ended, with err.
	start sync.Once
	ready chan struct{}
	err   error
}

// newEpoch returns an unverified epoch following prev.
func newEpoch(prev *epoch) *epoch {
	return &epoch{prev: prev, drained: make(chan struct{}), ready: make(chan struct{})}
}

func (e *epoch) retire() {
	e.retired.Store(true)
	if e.inflight.Load() == 0 {
		e.drain()
	}
}

func (e *epoch) drain() { e.once.Do(func() { close(e.drained) }) }

// NewGate returns the gate cfg describes.
func NewGate(cfg GateConfig) *Gate {
	g := &Gate{node: cfg.Node, journal: cfg.Journal, restorer: cfg.Restorer, info: cfg.Info, stamped: cfg.Stamped,
		mode: cfg.Exactness, grace: cfg.Grace, onCall: cfg.OnCall, now: cfg.Now}
	if g.now == nil {
		g.now = time.Now
	}
	g.cur.Store(newEpoch(nil))
	return g
}

// Node returns the address the gate stands before.
func (g *Gate) Node() string { return g.node }

// Changes counts the primaries the gate found replacing another era.
func (g *Gate) Changes() int64 { return g.changes.Load() }

// ModeChanges counts the epochs whose exactness differs from the one
// before (a replica attached, or gone longer than the grace).
func (g *Gate) ModeChanges() int64 { return g.modes.Load() }

// Era returns the era in force at the gate, and whether one is: "" and
// false while the gate has yet to verify its primary.
func (g *Gate) Era() (string, bool) {
	e := g.cur.Load()
	return e.name, e.verified
}

// Exact reports whether the epoch in force is verified and exact: its
// calls are stamped, and their writes journaled.
func (g *Gate) Exact() bool {
	e := g.cur.Load()
	return e.verified && e.exact
}

// wantsExact reports whether an epoch read with inf now should be exact,
// and notes a replica it shows.
func (g *Gate) wantsExact(inf ReplInfo, now time.Time) bool {
	if inf.Replicas > 0 {
		g.replicated.Store(now.UnixNano())
	}
	if g.mode == Always {
		return true
	}
	last := g.replicated.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < g.grace
}

// Observe takes a read of the gate's server made while the epoch in force
// was verified: it reports whether that epoch's exactness is no longer what
// the server's replicas call for (a replica attached to a primary the
// gate does not stamp for, or none for longer than the grace), in which
// case the caller ends the epoch (Invalidate) for the next verification to
// decide again.
func (g *Gate) Observe(inf ReplInfo) bool {
	e := g.cur.Load()
	if !e.verified || e.replid == "" {
		return false // unverified, or blind
	}
	return g.wantsExact(inf, g.now()) != e.exact
}

// Pass is one call let through a gate: the era it is stamped with. Leave
// must be called once the call ended.
type Pass struct {
	e   *epoch
	era any
}

// Era is the era to stamp the call with.
func (p Pass) Era() any { return p.era }

// Leave ends the call.
func (p Pass) Leave() {
	if e := p.e; e != nil && e.inflight.Add(-1) == 0 && e.retired.Load() {
		e.drain()
	}
}

type bypassKey struct{}

type bypass struct {
	g   *Gate
	era any
}

// Enter lets a call through: at once when the gate's primary is verified,
// or after verifying it (and restoring on it what the journal holds of the
// primary it replaced), within ctx. A call the gate's own restore sends
// passes at once, stamped with the era being verified.
func (g *Gate) Enter(ctx context.Context) (Pass, error) {
	if b, _ := ctx.Value(bypassKey{}).(*bypass); b != nil && b.g == g {
		return Pass{era: b.era}, nil
	}
	if g.onCall != nil {
		g.onCall()
	}
	for {
		e := g.cur.Load()
		if !e.verified {
			if err := g.verify(ctx, e); err != nil {
				return Pass{}, err
			}
			continue
		}
		e.inflight.Add(1)
		if g.cur.Load() != e {
			Pass{e: e}.Leave()
			continue
		}
		return Pass{e: e, era: e.era}, nil
	}
}

// Verify has the gate verify its primary now unless it is verified (the
// watcher's way to restore on a new primary before any call comes).
func (g *Gate) Verify(ctx context.Context) error {
	if e := g.cur.Load(); !e.verified {
		return g.verify(ctx, e)
	}
	return nil
}

// VerifyTimeout bounds one verification of a gate's primary: its read and
// the restore of what it lacks. Calls wait for it within their own
// deadlines; it goes on when they leave.
const VerifyTimeout = 5 * time.Second

// verify waits, within ctx, for e's verification, which the first call to
// meet e starts on a goroutine of the gate's own (Wait waits for it).
func (g *Gate) verify(ctx context.Context, e *epoch) error {
	e.start.Do(func() {
		g.runMu.Lock()
		if g.runs == 0 {
			g.idle = make(chan struct{})
		}
		g.runs++
		g.runMu.Unlock()
		go func() {
			defer g.ran()
			g.run(e)
		}()
	})
	select {
	case <-e.ready:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run verifies e; when that fails, a new unverified epoch takes e's place,
// for the next call to try again.
func (g *Gate) run(e *epoch) {
	ctx, cancel := context.WithTimeout(context.Background(), VerifyTimeout)
	defer cancel()
	ne, err := g.check(ctx, e)
	if err != nil {
		ne = newEpoch(nil)
	}
	e.err = err
	g.cur.CompareAndSwap(e, ne)
	close(e.ready)
}

// ran counts a verification's end.
func (g *Gate) ran() {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.runs--; g.runs == 0 {
		close(g.idle)
	}
}

// Wait waits, until ctx ends, for the verifications under way, if any
// (and for those they hand over to), leaving no goroutine behind when ctx
// ends first.
func (g *Gate) Wait(ctx context.Context) error {
	for {
		g.runMu.Lock()
		runs, idle := g.runs, g.idle
		g.runMu.Unlock()
		if runs == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// check reads the gate's server and, when it replaced another era,
// restores on it the journal's writes of that era, and returns the
// verified epoch to put in force.
func (g *Gate) check(ctx context.Context, e *epoch) (*epoch, error) {
	if p := e.prev; p != nil {
		// Every call stamped with the era that ended must end first: one
		// still waiting for a connection could otherwise reach the new
		// server with the old era.
		select {
		case <-p.drained:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	inf, err := g.info(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOPERM") {
		// A user whose ACL forbids INFO: the gate cannot tell one server
		// from another, and stamps nothing (no lineage, nothing journaled).
		if g.OnBlind != nil {
			g.OnBlind(err)
		}
		return &epoch{verified: true, era: eraNone, drained: make(chan struct{})}, nil
	}
	if err != nil {
		return nil, err
	}
	if !inf.Master {
		return nil, ErrNotPrimary
	}
	era := EraOf(inf.ReplID)
	var before []string
	if p := EraOf(inf.ReplID2); p != "" && p != era {
		before = append(before, p)
	}
	if g.last != "" && g.last != era && !slices.Contains(before, g.last) {
		before = append(before, g.last)
	}
	var boxed any = era
	if len(before) > 0 {
		if g.changedTo != era {
			g.changes.Add(1)
			g.changedTo = era
		}
		if entries := g.journal.Take(before...); len(entries) > 0 {
			// The restore is stamped whatever the new epoch's exactness:
			// what it applies is checked against the lineage.
			bctx := context.WithValue(ctx, bypassKey{}, &bypass{g: g, era: boxed})
			_, _, failed, err := g.restorer.Restore(bctx, entries)
			for _, f := range failed {
				g.journal.Add(f)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	g.last = era
	exact := g.wantsExact(inf, g.now())
	if p := e.prev; (p == nil || p.exact != exact || p.replid != inf.ReplID) && g.OnMode != nil {
		g.OnMode(exact, inf)
	}
	if p := e.prev; p != nil && p.exact != exact {
		g.modes.Add(1)
	}
	if !exact {
		boxed = eraNone
	}
	return &epoch{verified: true, exact: exact, era: boxed, name: era, replid: inf.ReplID, drained: make(chan struct{})}, nil
}

// Invalidate ends the epoch in force: the next call verifies the primary
// again, once every call stamped under the epoch has ended.
func (g *Gate) Invalidate() {
	for {
		e := g.cur.Load()
		if !e.verified {
			return
		}
		if g.cur.CompareAndSwap(e, newEpoch(e)) {
			e.retire()
			return
		}
	}
}

// Check is the gate's part of a new connection's OnConnect: inf is the
// connection's server's replication (ok when it was read). A connection
// must not carry a call stamped for another server: while an exact epoch
// is in force, or one that ended still has calls in flight (a call
// waiting for a connection in the pool among them), a connection to any
// other server (or one whose server could not be read) ends the epoch in
// force, and fails with ErrServerChanged before anything is written on it.
// Calls of an epoch that is not exact carry no era: a connection to
// another server ends that epoch, for the next verification to restore
// what the new server lacks and decide its exactness, and serves, as does
// one whose server could not be read.
func (g *Gate) Check(inf ReplInfo, ok bool) error {
	e := g.cur.Load()
	ref := e
	if !e.verified {
		ref = e.prev
		if ref == nil {
			return nil // the first verification: nothing was stamped yet
		}
		select {
		case <-ref.drained:
			return nil // the calls of the epoch that ended have ended
		default:
		}
	}
	if ref.replid == "" || ok && inf.Master && inf.ReplID == ref.replid {
		return nil // blind (see OnBlind), or the server verified
	}
	if !ref.exact {
		// No era to carry to the wrong server. Another server behind the
		// address ends the epoch; a server that could not be read (a slow
		// one) says nothing the watcher will not.
		if ok {
			g.Invalidate()
		}
		return nil
	}
	g.Invalidate()
	return ErrServerChanged
}

// after ends the epoch of a call that found its server demoted.
func (g *Gate) after(err error) {
	if err != nil && redis.HasErrorPrefix(err, "READONLY") {
		g.Invalidate()
	}
}

// DialHook is the gate's go-redis dial hook: none.
func (g *Gate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook stamps a command that carries an era, once through the gate.
func (g *Gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		i, ok := g.stamped(args)
		if !ok {
			return next(ctx, cmd)
		}
		p, err := g.Enter(ctx)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		args[i] = p.Era()
		err = next(ctx, cmd)
		g.after(cmd.Err())
		p.Leave()
		return err
	}
}

// ProcessPipelineHook stamps the commands of a pipeline that carry an
// era, the pipeline once through the gate.
func (g *Gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var p Pass
		entered := false
		for _, cmd := range cmds {
			args := cmd.Args()
			i, ok := g.stamped(args)
			if !ok {
				continue
			}
			if !entered {
				var err error
				if p, err = g.Enter(ctx); err != nil {
					for _, c := range cmds {
						c.SetErr(err)
					}
					return err
				}
				entered = true
			}
			args[i] = p.Era()
		}
		err := next(ctx, cmds)
		if entered {
			for _, cmd := range cmds {
				g.after(cmd.Err())
			}
			p.Leave()
		}
		return err
	}
}
