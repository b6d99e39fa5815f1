package store

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// ledgerLimit gives each identity 1000 units and one unit a week of
// refill, so that what an identity has left says exactly what the store
// counts: a debit a failover forgot shows as a unit admitted that the
// store no longer counts, a debit made twice as a unit counted that was
// never admitted.
var ledgerLimit = tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: 7 * 24 * time.Hour, Burst: 1000}

const (
	ledgerIdentities = 200
	ledgerCallers    = 32
	// ledgerLeft is about how many units each identity has left when the
	// primary changes: nearly used up, the case a late restore over-admits.
	ledgerLeft = 20
)

// ledgerOp is what a caller does to an identity: it returns the units the
// store told it it debited, and the most a failed call may have debited
// unbeknown to it.
type ledgerOp func(ctx context.Context, st *Redis, id string) (units, unknown int64, err error)

// mayHaveRun returns the units a call that failed with err may have
// debited: none when Redis refused it before running it (CLUSTERDOWN,
// checked before a command runs; the store sends a call again only when
// it was not run), else units. A call that failed at its deadline may have
// run: its caller leaves when the deadline passes, and a call written by
// then runs (a pipeline carrying several callers' calls goes on to the
// latest of their deadlines), debited once, by Redis, while its caller
// counts it as failed.
func mayHaveRun(err error, units int64) int64 {
	if redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return 0
	}
	return units
}

// decideOne is an Allow of one unit.
func decideOne(ctx context.Context, st *Redis, id string) (int64, int64, error) {
	d, err := st.Allow(ctx, tollgate.Request{Key: id, Limit: ledgerLimit})
	if err != nil {
		return 0, mayHaveRun(err, 1), err
	}
	if d.Allowed {
		return 1, 0, nil
	}
	return 0, 0, nil
}

// ledger runs callers doing op on identities in turn and keeps, per
// identity, the units the store said it debited (and drained from it up
// front), what failed calls may have debited, and every call's end and
// error.
type ledger struct {
	st   *Redis
	ids  []string
	op   ledgerOp
	stop chan struct{}
	wg   sync.WaitGroup

	admitted, drained, unknown []atomic.Int64
	mu                         sync.Mutex
	events                     []loadEvent
	// hold keeps the callers out while planHeld drains the identities:
	// each call holds it for reading, planHeld for writing.
	hold sync.RWMutex
}

func startLedger(st *Redis, identities int, op ledgerOp) *ledger {
	l := &ledger{st: st, op: op, stop: make(chan struct{}),
		admitted: make([]atomic.Int64, identities), drained: make([]atomic.Int64, identities), unknown: make([]atomic.Int64, identities)}
	for i := range identities {
		l.ids = append(l.ids, fmt.Sprintf("tenant-%d", i))
	}
	for g := range ledgerCallers {
		l.wg.Go(func() {
			for i := g * 7; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := i % len(l.ids)
				ctx, cancel := context.WithTimeout(context.Background(), failoverCallTimeout)
				l.hold.RLock()
				units, unknown, err := op(ctx, st, l.ids[id])
				l.hold.RUnlock()
				cancel()
				l.admitted[id].Add(units)
				l.unknown[id].Add(unknown)
				l.mu.Lock()
				l.events = append(l.events, loadEvent{id: id, end: time.Now(), err: err})
				l.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // a failing store answers fast; do not spin on it
				}
			}
		})
	}
	return l
}

func (l *ledger) finish() {
	close(l.stop)
	l.wg.Wait()
}

// report summarises the calls, as failoverLoad's does.
func (l *ledger) report() failoverReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	fl := &failoverLoad{events: l.events}
	return fl.report()
}

// plan drains the identities so that each has about ledgerLeft units left
// after another d of load (the rate measured over the load since from):
// the failover the test makes then meets quotas nearly used up. The units
// are debited with Overdraw, before anything fails, and counted as the
// identity's. The load goes on while it drains: on a busy machine the drain
// takes a second or more, which the horizons of the tests that plan with it
// count on (see planHeld).
func (l *ledger) plan(t *testing.T, from rateMark, d time.Duration) {
	t.Helper()
	rate := float64(l.units()-from.units) / float64(len(l.ids)) / time.Since(from.at).Seconds() // units per identity per second
	ahead := int64(rate*d.Seconds()) + ledgerLeft
	for i, id := range l.ids {
		d, err := l.st.Peek(context.Background(), tollgate.Request{Key: id, Limit: ledgerLimit})
		if err != nil {
			t.Fatal(err)
		}
		if n := d.Remaining - ahead; n > 0 {
			if _, err := l.st.Allow(context.Background(), tollgate.Request{Key: id, Limit: ledgerLimit, Cost: n, Overdraw: true}); err != nil {
				t.Fatal(err)
			}
			l.drained[i].Add(n)
		}
	}
	t.Logf("about %.0f units per identity per second: each identity drained to %d units, to be nearly used up in %s", rate, ahead, d)
}

// planHeld is plan with the callers waiting while it drains, so that d
// counts from its return for every identity: for a horizon shorter than
// the drain takes on a busy machine (1-1.7s beside the load), where the
// identities drained first would be used up before the failover, no
// decision would meet it, and the test would prove nothing.
func (l *ledger) planHeld(t *testing.T, from rateMark, d time.Duration) {
	t.Helper()
	l.hold.Lock()
	defer l.hold.Unlock()
	l.plan(t, from, d)
}

// awaitUsedUp waits, for at most timeout, until the callers were told
// that most identities' quotas are used up.
// usedUpWait is how long a failover test waits, once every identity is
// served again, for nine in ten of them to use up their quotas: about 2 s
// on a quiet machine, which a loaded one (the failover's errors, a CPU hog
// beside the race detector) can stretch several times. More calls after
// the failover only give a forgotten write more chances to show.
const usedUpWait = 20 * time.Second

func (l *ledger) awaitUsedUp(timeout time.Duration) {
	redistest.Await(timeout, func() bool { return l.usedUp() >= len(l.ids)*9/10 })
}

// usedUp counts the identities the callers were told have used up their
// quotas.
func (l *ledger) usedUp() int {
	n := 0
	for i := range l.ids {
		if l.admitted[i].Load()+l.drained[i].Load() >= ledgerLimit.Burst {
			n++
		}
	}
	return n
}

// ledgerWarmUp is how many calls the load makes before a test plans its
// failover: the first fifth open connections and load scripts, the others
// show the rate the plan counts on (10 to 30 thousand calls a second on a
// busy 2-core machine).
const ledgerWarmUp = 3000

// rateMark is where a load's rate is measured from: an instant and the
// units the callers were told were debited by then.
type rateMark struct {
	at    time.Time
	units int64
}

// units returns the units the callers were told were debited so far.
func (l *ledger) units() int64 {
	var n int64
	for i := range l.ids {
		n += l.admitted[i].Load()
	}
	return n
}

// warmUp waits until the load runs steadily and has shown its rate, and
// returns the mark the rate is measured from.
func (l *ledger) warmUp(t *testing.T) rateMark {
	t.Helper()
	l.awaitDecisions(t, ledgerWarmUp/5)
	from := rateMark{time.Now(), l.units()}
	l.awaitDecisions(t, ledgerWarmUp)
	return from
}

// awaitDecisions waits until the callers have made n calls in all.
func (l *ledger) awaitDecisions(t *testing.T, n int) {
	t.Helper()
	decided := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.events)
	}
	if !redistest.Await(20*time.Second, func() bool { return decided() >= n }) {
		l.finish()
		t.Fatalf("%d of %d calls made in 20s: the load does not run", decided(), n)
	}
}

// counted returns what the store counts for each identity, by Peek, which
// debits nothing: its units debited and its debt. A Peek that fails is
// asked again for up to 5 s: right after a Cluster failover, a slot map
// reloaded from a node that had not yet heard of the promotion can send a
// call to the dead primary once more (the store reloads the map again at
// that failure), and the account is of the count, not of that one call.
func (l *ledger) counted(t *testing.T) []int64 {
	t.Helper()
	out := make([]int64, len(l.ids))
	failed := 0
	for i, id := range l.ids {
		var d tollgate.Decision
		redistest.Eventually(t, 5*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			if d, err = l.st.Peek(ctx, tollgate.Request{Key: id, Limit: ledgerLimit}); err != nil {
				failed++
				return fmt.Errorf("identity %q after the failover: %w", id, err)
			}
			return nil
		})
		left := d.Remaining
		if d.Allowed {
			left++ // Peek answers as Allow would: what is left after a unit more
		}
		out[i] = ledgerLimit.Burst - left + d.Debt
	}
	if failed > 0 {
		t.Logf("%d peeks of the account failed and were asked again", failed)
	}
	return out
}

// failoverFigures is a failover's account: units admitted, units admitted
// that the store no longer counts (forgotten), units it counts that were
// never admitted (twice), and what the calls that failed may have debited.
type failoverFigures struct {
	admitted, forgotten, twice, unknown int64
	exhausted                           int // identities with nothing left
}

// account compares, identity by identity among ids (all when nil), the
// units the callers were told were debited with what the store counts.
func (l *ledger) account(t *testing.T, ids []int) failoverFigures {
	t.Helper()
	counted := l.counted(t)
	if ids == nil {
		for i := range l.ids {
			ids = append(ids, i)
		}
	}
	var f failoverFigures
	for _, i := range ids {
		a := l.admitted[i].Load()
		want := a + l.drained[i].Load()
		f.admitted += a
		f.unknown += l.unknown[i].Load()
		if counted[i] >= ledgerLimit.Burst {
			f.exhausted++
		}
		if want > counted[i] {
			f.forgotten += want - counted[i]
		} else {
			f.twice += counted[i] - want
		}
	}
	return f
}

// check fails t unless f is exact: nothing forgotten, and nothing counted
// twice beyond what failed calls may have debited, each within 0.1% of
// the units admitted.
func (f failoverFigures) check(t *testing.T) {
	t.Helper()
	slack := int64(math.Ceil(float64(f.admitted) / 1000))
	if f.forgotten > slack {
		t.Errorf("%d units admitted that the store no longer counts, more than 0.1%% of the %d admitted", f.forgotten, f.admitted)
	}
	if f.twice > f.unknown+slack {
		t.Errorf("%d units counted that were never admitted, more than the %d failed calls may have debited and 0.1%% of the %d admitted", f.twice, f.unknown, f.admitted)
	}
}

func (f failoverFigures) String() string {
	return fmt.Sprintf("%d units admitted: %d forgotten, %d counted twice (failed calls may have debited %d); %d identities used up",
		f.admitted, f.forgotten, f.twice, f.unknown, f.exhausted)
}

// awaitServed waits until every identity was decided without an error
// after since, and returns when the last of them first was.
func (l *ledger) awaitServed(t *testing.T, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var first map[int]time.Time
	served := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		first = map[int]time.Time{}
		for _, e := range l.events {
			if e.err == nil && e.end.After(since) {
				if _, ok := first[e.id]; !ok {
					first[e.id] = e.end
				}
			}
		}
		return len(first) == len(l.ids)
	}
	if !redistest.Await(timeout, served) {
		l.finish()
		t.Fatalf("%d of %d identities served within %s of %s; errors %v", len(first), len(l.ids), timeout, since.Format(time.StampMilli), l.report().kinds)
	}
	var last time.Time
	for _, at := range first {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// settle waits, for at most a second, for the journal to have restored
// what it will: the watcher's next read of the new primary.
func settle(st *Redis) {
	redistest.Await(time.Second, func() bool { return st.Stats().Journal == 0 })
}

// flood writes 16 KB values to c (keys under tag, which names their Cluster
// slot) until the returned stop is called: a frozen replica then falls
// behind for sure, whatever the load's own rate, since the stream it does
// not read outgrows the kernel's buffers (which would otherwise hold a
// slow load's writes and hand them over on thaw).
func flood(c redis.UniversalClient, tag string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	value := strings.Repeat("x", 16<<10)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			pipe := c.Pipeline()
			for k := range 8 {
				pipe.Set(context.Background(), fmt.Sprintf("%sflood:%d", tag, (i*8+k)%64), value, 10*time.Second)
			}
			_, _ = pipe.Exec(context.Background())
			// About 12 MB/s: more than the kernel's buffers hold in the
			// freeze, less than would make the primary drop the replica
			// (its output buffer's limits).
			time.Sleep(10 * time.Millisecond)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// awaitAcknowledged waits until primary's replicas acknowledge a write of
// its own: a replica whose link has just come up receives the stream only
// once it has acknowledged its sync, and a failover before that loses
// everything since the sync, which is Redis's doing, not the store's.
func awaitAcknowledged(t *testing.T, primary *redistest.Server, key string) {
	t.Helper()
	ctx := context.Background()
	pc := primary.Client(t).Conn()
	defer pc.Close()
	if err := pc.Set(ctx, key, 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s = %d, %v: its replica does not acknowledge", primary.Addr(), n, err)
	}
}

// sentinelSet starts a primary, a replica in sync with it and a Sentinel
// watching them, and returns a store deciding through
// redis.NewFailoverClient.
func sentinelSet(t *testing.T, opts ...RedisOption) (primary, replica, sentinel *redistest.Server, st *Redis) {
	t.Helper()
	primary = redistest.Start(t)
	replica = redistest.Replica(t, primary)
	awaitAcknowledged(t, primary, "synced")
	sentinel = redistest.Sentinel(t, primary)
	redistest.AwaitSentinelReplicas(t, sentinel, 1, 20*time.Second)
	redistest.LetDialProbesEnd(t) // a client of a killed primary may have started one
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            redistest.SentinelMaster,
		SentinelAddrs:         []string{sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	st = newRedis(t, c, append([]RedisOption{WithPrefix(redistest.KeyPrefix(t))}, opts...)...)
	return primary, replica, sentinel, st
}

// TestFailoverSentinelOrdered makes 32 callers decide on 200 identities,
// nearly used up, while Sentinel fails the primary over (SENTINEL
// FAILOVER, the replica in sync): the old primary admits until the client
// switches, and everything it took after the promotion is lost with it.
// The store restores on the new primary exactly what it lacks, before it
// decides there: nothing is forgotten, nothing counted twice but what
// failed calls may have debited.
func TestFailoverSentinelOrdered(t *testing.T) {
	primary, replica, sentinel, st := sentinelSet(t)
	l := startLedger(st, ledgerIdentities, decideOne)
	l.plan(t, l.warmUp(t), 600*time.Millisecond) // the client switches about that long after the command
	watch := watchSwitch(primary, replica)
	switched := time.Now()
	redistest.SentinelFailover(t, sentinel)
	addr, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	if addr != replica.Addr() {
		t.Fatalf("Sentinel named %s, want the replica %s", addr, replica.Addr())
	}
	l.awaitServed(t, named, 10*time.Second)
	l.awaitUsedUp(usedUpWait)
	l.finish()
	promoted, lastOld, oldWrites := watch()
	settle(st)

	r := l.report()
	f := l.account(t, nil)
	s := st.Stats()
	t.Logf("%d calls (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("replica promoted %s after SENTINEL FAILOVER, named %s after; the old primary wrote %d states after the promotion, its last %s after",
		promoted.Sub(switched).Round(time.Millisecond), named.Sub(switched).Round(time.Millisecond), oldWrites, lastOld.Sub(switched).Round(time.Millisecond))
	t.Logf("%v; journal: %d primary changes, %d writes restored (%d units), %d held; NOSCRIPT on the new primary: %d",
		f, s.PrimaryChanges, s.Restored, s.RestoredUnits, s.Held, replica.ErrorCount(t, "NOSCRIPT"))
	f.usedUp(t, len(l.ids))
	if oldWrites == 0 || s.Restored == 0 {
		t.Fatal("the old primary wrote nothing the new one lacked: the test proves nothing")
	}
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never met its new primary: the test proves nothing")
	}
	f.check(t)
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the new primary answered NOSCRIPT %d times, want at most 1", n)
	}
}

// usedUp fails t unless most identities used up their quota: a failover
// that over-admits shows only on quotas used up.
func (f failoverFigures) usedUp(t *testing.T, identities int) {
	t.Helper()
	if f.exhausted < identities/2 {
		t.Fatalf("%d of %d identities used up their quota: the test proves nothing about over-admission", f.exhausted, identities)
	}
}

// TestFailoverSentinelLagging freezes the replica (SIGSTOP), kills the
// primary (SIGKILL) 600ms later, lets the replica run again, and waits for
// Sentinel to promote it, under 32 callers on 200 identities nearly used
// up at the kill. What the replica had not received when the primary died
// is restored from the journal before the new primary decides: nothing
// forgotten, nothing counted twice but what failed calls may have debited.
func TestFailoverSentinelLagging(t *testing.T) {
	primary, replica, sentinel, st := sentinelSet(t)
	l := startLedger(st, ledgerIdentities, decideOne)
	l.plan(t, l.warmUp(t), 2*time.Second) // past the kill: the replica misses writes
	replica.Freeze(t)
	stopFlood := flood(primary.Client(t), "")
	redistest.Elapse(600 * time.Millisecond) // the replica falls behind
	primary.Stop(t)
	killed := time.Now()
	stopFlood()
	replica.Thaw(t)
	addr, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	if addr != replica.Addr() {
		t.Fatalf("Sentinel named %s, want the replica %s", addr, replica.Addr())
	}
	served := l.awaitServed(t, named, 10*time.Second)
	l.awaitUsedUp(usedUpWait)
	l.finish()
	settle(st)

	r := l.report()
	f := l.account(t, nil)
	s := st.Stats()
	t.Logf("%d calls (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("Sentinel named the replica %s after the kill; every identity served again %s after that",
		named.Sub(killed).Round(time.Millisecond), served.Sub(named).Round(time.Millisecond))
	t.Logf("%v; journal: %d primary changes, %d writes restored (%d units), %d held", f, s.PrimaryChanges, s.Restored, s.RestoredUnits, s.Held)
	if s.PrimaryChanges == 0 || s.Restored == 0 {
		t.Fatal("the store restored nothing on its new primary: the test proves nothing")
	}
	f.usedUp(t, len(l.ids))
	f.check(t)
}

// TestFailoverDemotedPrimaryLeftAtOnce fails a primary over as a DNS name
// or a proxy does, under 32 callers on 200 identities nearly used up: the
// replica is promoted (REPLICAOF NO ONE), the name is pointed at it, and
// the old primary is demoted (REPLICAOF) under the connections still open
// to it, which then answer READONLY. A new connection meets another server
// behind the name: the store restores there what the old primary wrote
// that it lacks, before it decides there; every decision that met READONLY
// is sent again to the new primary; nothing is forgotten.
func TestFailoverDemotedPrimaryLeftAtOnce(t *testing.T) {
	ctx := context.Background()
	old := redistest.Start(t)
	replica := redistest.Replica(t, old)
	awaitAcknowledged(t, old, "synced")

	var target atomic.Value
	target.Store(old.Addr())
	c := redis.NewClient(&redis.Options{
		Addr:                  "primary.invalid:6379", // resolved by the dialer, as DNS would
		ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))

	l := startLedger(st, ledgerIdentities, decideOne)
	l.planHeld(t, l.warmUp(t), 100*time.Millisecond)
	usedUp := l.usedUp() // none, unless the callers outran the plan
	rc, oc := replica.Client(t), old.Client(t)
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	target.Store(replica.Addr())
	switched := time.Now()
	host, port, _ := net.SplitHostPort(replica.Addr())
	if err := oc.SlaveOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	served := l.awaitServed(t, switched, 5*time.Second)
	l.awaitUsedUp(usedUpWait)
	l.finish()
	settle(st)

	r := l.report()
	f := l.account(t, nil)
	readonly := old.ErrorCount(t, "READONLY")
	s := st.Stats()
	t.Logf("%d calls (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("%d of %d identities used up at the switch; the demoted primary answered READONLY %d times; every identity served again %s after the switch",
		usedUp, len(l.ids), readonly, served.Sub(switched).Round(time.Millisecond))
	t.Logf("%v; journal: %d primary changes, %d writes restored (%d units), %d held", f, s.PrimaryChanges, s.Restored, s.RestoredUnits, s.Held)
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never met its new primary: the test proves nothing")
	}
	if n := r.kinds["READONLY"]; n > ledgerCallers {
		t.Errorf("%d READONLY errors reached callers, more than the %d decisions in flight", n, ledgerCallers)
	}
	f.usedUp(t, len(l.ids))
	f.check(t)
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the new primary answered NOSCRIPT %d times, want at most 1", n)
	}
}

// clusterLedger starts a 3-primary Cluster with a replica each
// (cluster-node-timeout 1s), a store on it, and returns them with the
// primary serving tenant-0 (the one a test fails) and its replica, in
// sync.
func clusterLedger(t *testing.T) (cl *redistest.Cluster, st *Redis, victim, replica *redistest.Server, ownerOf func(id string) string) {
	t.Helper()
	cl = redistest.NewClusterTimeout(t, 1, time.Second)
	redistest.LetDialProbesEnd(t) // a client of the killed primary may have started one
	cc, st, _ := clusterStore(t, cl)
	ctx := context.Background()
	ownerOf = func(id string) string {
		m, err := cc.MasterForKey(ctx, decisionKeys(st.keyPrefix(id), ledgerLimit.Algorithm, id, "")[0])
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	victim = cl.Node(ownerOf("tenant-0"))
	replica = cl.ReplicaOf(t, victim)
	awaitAcknowledged(t, victim, "{tenant-0}synced")
	return cl, st, victim, replica, ownerOf
}

// TestFailoverClusterLagging freezes (SIGSTOP) the replica of one primary
// of a 3-primary Cluster for 4s under 32 callers on 300 identities, kills
// (SIGKILL) the primary when their quotas are nearly used up, lets the
// replica run again and waits for the Cluster to promote it. What the
// replica had not received is restored on it before it decides: nothing
// forgotten, nothing counted twice but what failed calls may have debited;
// the identities of the other primaries are exact to the unit (see
// clusterFigures).
func TestFailoverClusterLagging(t *testing.T) {
	cl, st, victim, replica, ownerOf := clusterLedger(t)
	l := startLedger(st, 300, decideOne)
	onVictim := l.on(victim.Addr(), ownerOf)
	l.plan(t, l.warmUp(t), 4*time.Second)
	replica.Freeze(t)
	stopFlood := flood(cl.Client(t), "{tenant-0}") // the victim's slot
	redistest.Elapse(4 * time.Second)              // the replica falls behind
	victim.Stop(t)
	killed := time.Now()
	stopFlood()
	replica.Thaw(t)
	promoted := cl.AwaitPromoted(t, replica, 20*time.Second)
	served := l.awaitServed(t, promoted, 10*time.Second)
	l.awaitUsedUp(usedUpWait)
	l.finish()
	settle(st)
	clusterFigures(t, l, st, onVictim, killed, promoted, served)
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the promoted replica answered NOSCRIPT %d times, want at most 1", n)
	}
}

// TestFailoverClusterInSync kills (SIGKILL) one primary of a 3-primary
// Cluster whose replicas are in sync, under 32 callers on 300 identities
// nearly used up: the identities of the surviving primaries are exact to
// the unit (see clusterFigures); those of the killed one lose nothing and
// count nothing twice but what failed calls may have debited.
func TestFailoverClusterInSync(t *testing.T) {
	cl, st, victim, replica, ownerOf := clusterLedger(t)
	l := startLedger(st, 300, decideOne)
	onVictim := l.on(victim.Addr(), ownerOf)
	l.plan(t, l.warmUp(t), 2500*time.Millisecond) // the promotion takes about 2s
	redistest.Elapse(300 * time.Millisecond)      // the load goes on before the kill, as planned
	victim.Stop(t)
	killed := time.Now()
	promoted := cl.AwaitPromoted(t, replica, 20*time.Second)
	served := l.awaitServed(t, promoted, 10*time.Second)
	l.awaitUsedUp(usedUpWait)
	l.finish()
	settle(st)
	clusterFigures(t, l, st, onVictim, killed, promoted, served)
}

// on returns the indexes of the identities whose state the primary at addr
// serves now.
func (l *ledger) on(addr string, ownerOf func(string) string) map[int]bool {
	out := map[int]bool{}
	for i, id := range l.ids {
		if ownerOf(id) == addr {
			out[i] = true
		}
	}
	return out
}

// clusterFigures reports and checks a Cluster failover's ledger: the
// killed primary's identities as every failover's; the other primaries'
// exact to the unit: nothing forgotten, and nothing counted twice but
// what calls that failed at their deadline may have debited (none
// usually; see mayHaveRun).
func clusterFigures(t *testing.T, l *ledger, st *Redis, victim map[int]bool, killed, promoted, served time.Time) {
	t.Helper()
	var onVictim, others []int
	for i := range l.ids {
		if victim[i] {
			onVictim = append(onVictim, i)
		} else {
			others = append(others, i)
		}
	}
	if len(onVictim) == 0 || len(others) == 0 {
		t.Fatalf("%d identities on the killed primary, %d on the others: the split proves nothing", len(onVictim), len(others))
	}
	r := l.report()
	fv, fo := l.account(t, onVictim), l.account(t, others)
	s := st.Stats()
	t.Logf("%d calls (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("replica promoted %s after the kill; every identity served again %s after that",
		promoted.Sub(killed).Round(time.Millisecond), served.Sub(promoted).Round(time.Millisecond))
	t.Logf("the killed primary's %d identities: %v", len(onVictim), fv)
	t.Logf("the other primaries' %d identities (%d errors): %v", len(others), r.errorsAmong(others), fo)
	t.Logf("journal: %d primary changes, %d writes restored (%d units), %d held", s.PrimaryChanges, s.Restored, s.RestoredUnits, s.Held)
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never met its new primary: the test proves nothing")
	}
	fv.usedUp(t, len(onVictim))
	fv.check(t)
	// Exact to the unit: nothing forgotten, and nothing counted that was
	// not admitted but what calls that failed may have debited. A call on
	// them that failed with CLUSTERDOWN (while a slot range has no primary)
	// did not run; one that failed at its deadline did not if it was still
	// in its batcher's queue, and may have if it was in flight (a machine
	// under load can hold a pipeline past a caller's deadline): those are
	// the only units allowed.
	if fo.forgotten != 0 || fo.twice > fo.unknown {
		t.Errorf("the other primaries' identities: %d forgotten, %d counted twice; want 0, and at most the %d units failed calls may have debited",
			fo.forgotten, fo.twice, fo.unknown)
	}
}

// settleThree admits one unit, then settles it at three: a call that cost
// more than it reserved, debited past empty when it must be.
func settleThree(ctx context.Context, st *Redis, id string) (int64, int64, error) {
	req := tollgate.Request{Key: id, Limit: ledgerLimit}
	d, err := st.Allow(ctx, req)
	if err != nil {
		return 0, mayHaveRun(err, 1), err
	}
	if !d.Allowed {
		return 0, 0, nil
	}
	if _, err := st.Settle(ctx, req, d.Admission(), 3); err != nil {
		return 1, mayHaveRun(err, 2), err
	}
	return 3, 0, nil
}

// overdrawOne debits one unit whether or not it fits.
func overdrawOne(ctx context.Context, st *Redis, id string) (int64, int64, error) {
	if _, err := st.Allow(ctx, tollgate.Request{Key: id, Limit: ledgerLimit, Overdraw: true}); err != nil {
		return 0, mayHaveRun(err, 1), err
	}
	return 1, 0, nil
}

// TestFailoverKeepsSettlementsAndOverdraws runs the lagging Sentinel
// failover of TestFailoverSentinelLagging with callers that settle each
// admission at three units (two debited past empty), and with callers that
// overdraw: what the replica lacked of those debits is restored too.
func TestFailoverKeepsSettlementsAndOverdraws(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   ledgerOp
	}{{"settle", settleThree}, {"overdraw", overdrawOne}} {
		t.Run(tc.name, func(t *testing.T) {
			primary, replica, sentinel, st := sentinelSet(t)
			l := startLedger(st, ledgerIdentities, tc.op)
			l.plan(t, l.warmUp(t), 2*time.Second) // past the kill: the replica misses writes
			replica.Freeze(t)
			stopFlood := flood(primary.Client(t), "")
			redistest.Elapse(600 * time.Millisecond) // the replica falls behind
			primary.Stop(t)
			stopFlood()
			replica.Thaw(t)
			_, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
			l.awaitServed(t, named, 10*time.Second)
			l.awaitUsedUp(usedUpWait)
			l.finish()
			settle(st)
			r := l.report()
			f := l.account(t, nil)
			s := st.Stats()
			t.Logf("%d calls (%.0f/s), %d errors: %v", r.decisions, r.rate(), r.errors, r.kinds)
			t.Logf("%v; journal: %d writes restored (%d units), %d held", f, s.Restored, s.RestoredUnits, s.Held)
			if s.Restored == 0 {
				t.Fatal("the store restored nothing on its new primary: the test proves nothing")
			}
			f.usedUp(t, len(l.ids))
			f.check(t)
		})
	}
}

// TestFailoverKeepsSeats runs the lagging Sentinel failover with callers
// that take in-flight seats (a thousand an identity, held for a minute)
// and release one now and then: after the failover every identity holds
// exactly the seats taken and not released, none lost (which would give a
// seat twice) and none released come back.
func TestFailoverKeepsSeats(t *testing.T) {
	primary, replica, sentinel, st := sentinelSet(t)
	const identities = 100
	var held [identities]atomic.Int64
	var unknownTake, unknownRelease atomic.Int64 // calls that failed, which may or may not have run
	var answered atomic.Int64                    // calls that did not fail
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range ledgerCallers {
		wg.Go(func() {
			var mine [][2]any // seats this caller holds: identity, id
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), failoverCallTimeout)
				if i%4 == 3 && len(mine) > 0 {
					h := mine[len(mine)-1]
					err := st.ReleaseSeat(ctx, tollgate.Seat{Key: fmt.Sprintf("seats-%d", h[0]), ID: h[1].(string)})
					if err == nil {
						answered.Add(1)
						held[h[0].(int)].Add(-1)
						mine = mine[:len(mine)-1]
					} else {
						unknownRelease.Add(1)
					}
				} else {
					id := (g*31 + i) % identities
					seat := fmt.Sprintf("c%d-%d", g, i)
					d, err := st.AcquireSeat(ctx, tollgate.Seat{Key: fmt.Sprintf("seats-%d", id), Max: 1000, ID: seat, TTL: time.Minute})
					switch {
					case err != nil:
						unknownTake.Add(1)
					case d.Allowed:
						held[id].Add(1)
						mine = append(mine, [2]any{id, seat})
						fallthrough
					default:
						answered.Add(1)
					}
				}
				cancel()
			}
		})
	}
	// The callers hold seats before the replica falls behind, and go on
	// on the new primary, each identity's seats taken and released there.
	progress := func(what string, done func() bool) {
		t.Helper()
		if !redistest.Await(10*time.Second, done) {
			close(stop)
			wg.Wait()
			t.Fatalf("%s within 10s: %d calls answered, %d takes and %d releases failed",
				what, answered.Load(), unknownTake.Load(), unknownRelease.Load())
		}
	}
	progress("no 4000 seats held", func() bool {
		var n int64
		for i := range held {
			n += held[i].Load()
		}
		return n >= 4000
	})
	replica.Freeze(t)
	stopFlood := flood(primary.Client(t), "")
	redistest.Elapse(600 * time.Millisecond) // the replica falls behind
	primary.Stop(t)
	stopFlood()
	replica.Thaw(t)
	redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	since := answered.Load()
	progress("no 4000 calls answered on the new primary", func() bool { return answered.Load()-since >= 4000 })
	close(stop)
	wg.Wait()
	settle(st)
	var want, got, lost, extra int64
	for id := range identities {
		n, err := st.SeatsInUse(context.Background(), fmt.Sprintf("seats-%d", id))
		if err != nil {
			t.Fatal(err)
		}
		w := held[id].Load()
		want, got = want+w, got+n
		if n < w {
			lost += w - n
		} else {
			extra += n - w
		}
	}
	s := st.Stats()
	t.Logf("%d seats held by the callers, %d counted by the store: %d fewer, %d more (calls that failed: %d takes, %d releases); journal: %d writes restored, %d held",
		want, got, lost, extra, unknownTake.Load(), unknownRelease.Load(), s.Restored, s.Held)
	if s.Restored == 0 {
		t.Fatal("the store restored nothing on its new primary: the test proves nothing")
	}
	// A seat the store no longer counts would be given twice; only a
	// release that failed after it ran can account for one.
	if lost > unknownRelease.Load() {
		t.Errorf("%d seats held that the store no longer counts, more than the %d releases that failed", lost, unknownRelease.Load())
	}
	if extra > unknownTake.Load() {
		t.Errorf("%d seats counted that no caller holds, more than the %d takes that failed", extra, unknownTake.Load())
	}
}

// TestJournalMemoryIsCapped stops (SIGSTOP) the replica of a primary under
// 32 callers, with the journal capped at 1 MiB: the journal holds at most
// that, drops its oldest writes past it, counts them and warns; once the
// replica runs again and acknowledges, the journal empties.
func TestJournalMemoryIsCapped(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Replica(t, primary)
	awaitAcknowledged(t, primary, "synced")
	var logs syncBuffer
	st := newRedis(t, primary.Client(t), WithPrefix(redistest.KeyPrefix(t)), WithJournalBytes(1<<20),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	replica.Freeze(t)
	thawed := false
	defer func() {
		if !thawed {
			replica.Thaw(t)
		}
	}()
	l := startLedger(st, 10_000, decideOne)
	// Sampled until the journal has filled up and then dropped as many
	// writes as it holds: every write it held when full has given way.
	var most int64
	turned := redistest.Await(20*time.Second, func() bool {
		s := st.Stats()
		most = max(most, s.JournalBytes)
		return s.JournalDropped > 0 && s.JournalDropped >= int64(s.Journal)
	})
	l.finish()
	s := st.Stats()
	t.Logf("%d calls; the journal held at most %d bytes (%d writes now), dropped %d writes", l.report().decisions, most, s.Journal, s.JournalDropped)
	if most > 1<<20 {
		t.Errorf("the journal held %d bytes, more than its cap of %d", most, 1<<20)
	}
	if !turned {
		t.Fatal("the journal did not drop as many writes as it holds within 20s: the test proves nothing")
	}
	if !strings.Contains(logs.String(), "the failover journal is full") {
		t.Errorf("no warning of the writes dropped; the log holds %q", logs.String())
	}
	replica.Thaw(t)
	thawed = true
	redistest.Await(10*time.Second, func() bool { return st.Stats().Journal == 0 })
	if n := st.Stats().Journal; n > 0 {
		t.Errorf("%d writes still in the journal after the replica acknowledged", n)
	}
}

// TestFailoverJournalWithoutInfo decides as a user whose ACL refuses INFO:
// the store cannot tell one primary from another, so it stamps no lineage
// and journals nothing, warns once, and decides as usual.
func TestFailoverJournalWithoutInfo(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	o := srv.Options()
	o.Username, o.Password = "noinfo", "pw"
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	var logs syncBuffer
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for i := range 20 {
		d, err := st.Allow(ctx, tollgate.Request{Key: fmt.Sprint("k", i%3), Limit: ledgerLimit})
		if err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v, %v", i, d, err)
		}
	}
	if s := st.Stats(); s.Journal != 0 {
		t.Errorf("the journal holds %d writes, want none", s.Journal)
	}
	state, err := srv.Client(t).Get(ctx, decisionKeys(st.keyPrefix("k0"), ledgerLimit.Algorithm, "k0", "")[0]).Result()
	if err != nil || strings.Contains(state, "|") {
		t.Errorf("state %q (%v), want one without lineage", state, err)
	}
	if n := strings.Count(logs.String(), "refuses INFO"); n != 1 {
		t.Errorf("%d warnings that Redis refuses INFO, want 1; the log holds %q", n, logs.String())
	}
}
