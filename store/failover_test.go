package store

import (
	"context"
	"fmt"
	"net"
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
// store no longer counts.
var ledgerLimit = tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: 7 * 24 * time.Hour, Burst: 1000}

const (
	ledgerIdentities = 200
	ledgerCallers    = 32
)

// ledger runs callers deciding on identities in turn and keeps, per
// identity, the units admitted, and every decision's end and error.
type ledger struct {
	st   *Redis
	ids  []string
	stop chan struct{}
	wg   sync.WaitGroup

	admitted []atomic.Int64
	mu       sync.Mutex
	events   []loadEvent
}

func startLedger(st *Redis, identities, callers int) *ledger {
	l := &ledger{st: st, stop: make(chan struct{}), admitted: make([]atomic.Int64, identities)}
	for i := range identities {
		l.ids = append(l.ids, fmt.Sprintf("tenant-%d", i))
	}
	for g := range callers {
		l.wg.Go(func() {
			for i := g * 7; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := i % len(l.ids)
				ctx, cancel := context.WithTimeout(context.Background(), failoverCallTimeout)
				d, err := st.Allow(ctx, tollgate.Request{Key: l.ids[id], Limit: ledgerLimit})
				cancel()
				if err == nil && d.Allowed {
					l.admitted[id].Add(1)
				}
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

// report summarises the decisions, as failoverLoad's does.
func (l *ledger) report() failoverReport {
	fl := &failoverLoad{events: l.events}
	return fl.report()
}

// awaitServed waits until every identity was decided without an error
// after since, and returns when the last of them first was.
func (l *ledger) awaitServed(t *testing.T, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		first := map[int]time.Time{}
		for _, e := range l.events {
			if e.err == nil && e.end.After(since) {
				if _, ok := first[e.id]; !ok {
					first[e.id] = e.end
				}
			}
		}
		l.mu.Unlock()
		if len(first) == len(l.ids) {
			var last time.Time
			for _, at := range first {
				if at.After(last) {
					last = at
				}
			}
			return last
		}
		if time.Now().After(deadline) {
			l.finish()
			t.Fatalf("%d of %d identities served within %s of %s; errors %v", len(first), len(l.ids), timeout, since.Format(time.StampMilli), l.report().kinds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// account compares, identity by identity, the units the callers were told
// were admitted with what the store counts (read with Peek, which debits
// nothing): forgotten adds the units admitted that the store no longer
// counts, twice the units it counts that were not admitted (debited again
// although they had reached the new primary, or debited by a decision
// whose reply was lost).
func (l *ledger) account(t *testing.T) (admitted, forgotten, twice int64) {
	t.Helper()
	// The journal replays within a probe of the failover; give the last
	// one its round trip.
	time.Sleep(3 * journalProbeEvery)
	for i, id := range l.ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := l.st.Peek(ctx, tollgate.Request{Key: id, Limit: ledgerLimit})
		cancel()
		if err != nil {
			t.Fatalf("identity %q after the failover: %v", id, err)
		}
		counted := ledgerLimit.Burst - d.Remaining + d.Debt
		a := l.admitted[i].Load()
		admitted += a
		if a > counted {
			forgotten += a - counted
		} else {
			twice += counted - a
		}
	}
	return admitted, forgotten, twice
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

func closeStore(t *testing.T, st *Redis) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// TestFailoverDemotedPrimaryLeftAtOnce fails a primary over as a DNS name
// or a proxy does, under 32 callers: the replica is promoted (REPLICAOF NO
// ONE), the name is pointed at it, and the old primary is demoted
// (REPLICAOF) under the connections still open to it, which then answer
// READONLY. The store drops each such connection and sends the decision
// again on a new one, to the new primary: no READONLY reaches a caller,
// every identity is served on, and the journal debits on the new primary
// what the old one admitted after the promotion, so nothing is forgotten.
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
	closeStore(t, st)

	l := startLedger(st, ledgerIdentities, ledgerCallers)
	time.Sleep(700 * time.Millisecond)
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
	time.Sleep(700 * time.Millisecond)
	l.finish()

	r := l.report()
	admitted, forgotten, twice := l.account(t)
	readonly := old.ErrorCount(t, "READONLY")
	s := st.Stats()
	t.Logf("%d decisions (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("the demoted primary answered READONLY %d times; every identity served again %s after the switch", readonly, served.Sub(switched).Round(time.Millisecond))
	t.Logf("%d units admitted: %d forgotten, %d counted twice; journal: %d primary changes, %d admissions replayed (%d units), %d shown replicated",
		admitted, forgotten, twice, s.PrimaryChanges, s.Replayed, s.ReplayedUnits, s.Replicated)
	if readonly == 0 {
		t.Fatal("the demoted primary never answered READONLY: the test proves nothing")
	}
	if n := r.kinds["READONLY"]; n > ledgerCallers {
		t.Errorf("%d READONLY errors reached callers, more than the %d decisions in flight", n, ledgerCallers)
	}
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never saw its primary change: the test proves nothing")
	}
	if forgotten != 0 {
		t.Errorf("%d units admitted that the store no longer counts", forgotten)
	}
	if twice > admitted/10 {
		t.Errorf("%d units counted twice, more than a tenth of the %d admitted", twice, admitted)
	}
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the new primary answered NOSCRIPT %d times, want at most 1", n)
	}
}

// sentinelSet starts a primary, a replica in sync with it and a Sentinel
// watching them, and returns a store deciding through
// redis.NewFailoverClient.
func sentinelSet(t *testing.T) (primary, replica, sentinel *redistest.Server, st *Redis) {
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
	st = newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
	closeStore(t, st)
	return primary, replica, sentinel, st
}

// TestFailoverSentinelOrdered makes 32 callers decide on 200 identities
// while Sentinel fails the primary over (SENTINEL FAILOVER, the replica in
// sync): the old primary admits until Sentinel demotes it, and everything
// it took after the promotion is lost with it, which the journal debits
// again on the new primary. Nothing is forgotten, at most a tenth of the
// units admitted are counted twice, and the new primary answers NOSCRIPT at
// most once (the scripts are loaded as the client connects to it).
func TestFailoverSentinelOrdered(t *testing.T) {
	primary, replica, sentinel, st := sentinelSet(t)
	l := startLedger(st, ledgerIdentities, ledgerCallers)
	time.Sleep(700 * time.Millisecond)
	watch := watchSwitch(primary, replica)
	switched := time.Now()
	redistest.SentinelFailover(t, sentinel)
	addr, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	if addr != replica.Addr() {
		t.Fatalf("Sentinel named %s, want the replica %s", addr, replica.Addr())
	}
	l.awaitServed(t, named, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	l.finish()
	promoted, lastOld, oldWrites := watch()

	r := l.report()
	admitted, forgotten, twice := l.account(t)
	s := st.Stats()
	t.Logf("%d decisions (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("replica promoted %s after SENTINEL FAILOVER, named %s after; the old primary wrote %d decisions after the promotion, its last %s after",
		promoted.Sub(switched).Round(time.Millisecond), named.Sub(switched).Round(time.Millisecond), oldWrites, lastOld.Sub(switched).Round(time.Millisecond))
	t.Logf("%d units admitted: %d forgotten, %d counted twice (%.1f%%); journal: %d primary changes, %d admissions replayed (%d units), %d shown replicated; NOSCRIPT: %d on the new primary, %d seen by the client",
		admitted, forgotten, twice, 100*float64(twice)/float64(admitted), s.PrimaryChanges, s.Replayed, s.ReplayedUnits, s.Replicated, replica.ErrorCount(t, "NOSCRIPT"), s.NoScript)
	if oldWrites == 0 {
		t.Fatal("the old primary wrote nothing after the promotion: the test proves nothing")
	}
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never saw its primary change: the test proves nothing")
	}
	if forgotten != 0 {
		t.Errorf("%d units admitted that the store no longer counts", forgotten)
	}
	if twice > admitted/10 {
		t.Errorf("%d units counted twice, more than a tenth of the %d admitted", twice, admitted)
	}
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the new primary answered NOSCRIPT %d times, want at most 1", n)
	}
	if r.kinds["NOSCRIPT"] != 0 {
		t.Errorf("%d NOSCRIPT errors reached callers", r.kinds["NOSCRIPT"])
	}
}

// TestFailoverSentinelLagging freezes the replica (SIGSTOP), kills the
// primary (SIGKILL) 600ms later, lets the replica run again, and waits for
// Sentinel to promote it, under 32 callers on 200 identities. What the
// replica had not received when the primary died is debited again by the
// journal: nothing is forgotten, at most a fifth of the units admitted are
// counted twice, and decisions resume within the promotion time.
func TestFailoverSentinelLagging(t *testing.T) {
	primary, replica, sentinel, st := sentinelSet(t)
	l := startLedger(st, ledgerIdentities, ledgerCallers)
	time.Sleep(700 * time.Millisecond)
	replica.Freeze(t)
	time.Sleep(600 * time.Millisecond)
	primary.Stop(t)
	killed := time.Now()
	replica.Thaw(t)
	addr, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	if addr != replica.Addr() {
		t.Fatalf("Sentinel named %s, want the replica %s", addr, replica.Addr())
	}
	served := l.awaitServed(t, named, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	l.finish()

	r := l.report()
	admitted, forgotten, twice := l.account(t)
	s := st.Stats()
	t.Logf("%d decisions (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("Sentinel named the replica %s after the kill; every identity served again %s after that",
		named.Sub(killed).Round(time.Millisecond), served.Sub(named).Round(time.Millisecond))
	t.Logf("%d units admitted: %d forgotten, %d counted twice (%.1f%%); journal: %d primary changes, %d admissions replayed (%d units), %d shown replicated",
		admitted, forgotten, twice, 100*float64(twice)/float64(admitted), s.PrimaryChanges, s.Replayed, s.ReplayedUnits, s.Replicated)
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never saw its primary change: the test proves nothing")
	}
	if forgotten != 0 {
		t.Errorf("%d units admitted that the store no longer counts", forgotten)
	}
	if twice > admitted/5 {
		t.Errorf("%d units counted twice, more than a fifth of the %d admitted", twice, admitted)
	}
	// Decisions resume once the client has switched: within the promotion
	// time (kill to named), with a second's room for a busy machine.
	if d := served.Sub(named); d > named.Sub(killed)+time.Second {
		t.Errorf("identities served again %s after the promotion, longer than the promotion took", d)
	}
}

// TestFailoverClusterLagging freezes (SIGSTOP) the replica of one primary
// of a 3-primary Cluster (a replica each, cluster-node-timeout 1s) for 4s
// under 32 callers on 300 identities, kills (SIGKILL) the primary, lets
// the replica run again and waits for the Cluster to promote it. What the
// replica had not received is debited again by the journal on the
// promoted replica: nothing is forgotten, at most a fifth of the units
// admitted are counted twice, and decisions resume within the promotion
// time.
func TestFailoverClusterLagging(t *testing.T) {
	cl := redistest.NewClusterTimeout(t, 1, time.Second)
	redistest.LetDialProbesEnd(t) // a client of the killed primary may have started one
	cc, st, _ := clusterStore(t, cl)
	closeStore(t, st)
	ctx := context.Background()

	first := "tenant-0"
	key := decisionKeys(st.keyPrefix(first), ledgerLimit.Algorithm, first, "")[0]
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	victim := cl.Node(m.Options().Addr)
	replica := cl.ReplicaOf(t, victim)
	vc := victim.Client(t).Conn()
	if err := vc.Set(ctx, key+":synced", 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := vc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the primary to kill = %d, %v: its replica does not acknowledge", n, err)
	}
	_ = vc.Close()

	l := startLedger(st, 300, ledgerCallers)
	time.Sleep(700 * time.Millisecond)
	replica.Freeze(t)
	time.Sleep(4 * time.Second)
	victim.Stop(t)
	killed := time.Now()
	replica.Thaw(t)
	promoted := cl.AwaitPromoted(t, replica, 20*time.Second)
	served := l.awaitServed(t, promoted, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	l.finish()

	r := l.report()
	admitted, forgotten, twice := l.account(t)
	s := st.Stats()
	t.Logf("%d decisions (%.0f/s) on %d identities by %d callers, %d errors: %v", r.decisions, r.rate(), len(l.ids), ledgerCallers, r.errors, r.kinds)
	t.Logf("replica promoted %s after the kill; every identity served again %s after that",
		promoted.Sub(killed).Round(time.Millisecond), served.Sub(promoted).Round(time.Millisecond))
	t.Logf("%d units admitted: %d forgotten, %d counted twice (%.1f%%); journal: %d primary changes, %d admissions replayed (%d units), %d shown replicated; NOSCRIPT on the promoted replica: %d",
		admitted, forgotten, twice, 100*float64(twice)/float64(admitted), s.PrimaryChanges, s.Replayed, s.ReplayedUnits, s.Replicated, replica.ErrorCount(t, "NOSCRIPT"))
	if s.PrimaryChanges == 0 {
		t.Fatal("the store never saw its primary change: the test proves nothing")
	}
	if forgotten != 0 {
		t.Errorf("%d units admitted that the store no longer counts", forgotten)
	}
	if twice > admitted/5 {
		t.Errorf("%d units counted twice, more than a fifth of the %d admitted", twice, admitted)
	}
	if d := served.Sub(promoted); d > promoted.Sub(killed)+time.Second {
		t.Errorf("identities served again %s after the promotion, longer than the promotion took", d)
	}
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the promoted replica answered NOSCRIPT %d times, want at most 1", n)
	}
}

// TestFailoverReplicaAnswersReadOnly decides through a store pointed at a
// replica, from 32 goroutines so that decisions share batch script calls:
// every decision fails with READONLY, the error on which go-redis closes the
// connection, never with the batch script's per-decision write error, and
// nothing is written.
func TestFailoverReplicaAnswersReadOnly(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Replica(t, primary)
	st := newRedis(t, replica.Client(t), WithPrefix(redistest.KeyPrefix(t)), WithJournal(0))
	var mu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				_, err := st.Allow(context.Background(), tollgate.Request{Key: fmt.Sprintf("k%d-%d", g, i), Limit: ledgerLimit})
				kind := "none"
				if err != nil {
					kind = errorKind(err)
				}
				mu.Lock()
				kinds[kind]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if kinds["READONLY"] != 32*20 {
		t.Errorf("outcomes %v, want READONLY for all %d decisions", kinds, 32*20)
	}
	if n, err := replica.Client(t).DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("the replica holds %d keys (%v), want 0", n, err)
	}
	t.Logf("outcomes %v; the replica answered READONLY %d times", kinds, replica.ErrorCount(t, "READONLY"))
}
