package store

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// failoverLimit gives each identity 7000 units that do not refill during a
// test (one unit a day), so that after a failover the state Redis kept can
// be compared, unit for unit, with what callers were told: a write lost in
// the failover shows as a unit admitted but never debited.
var failoverLimit = tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: 24 * time.Hour, Burst: 7000}

const (
	// failoverCallers is how many goroutines call the store during a
	// failover test, round-robin over the identities.
	failoverCallers = 8
	// failoverCallTimeout is each decision's deadline, as a limiter's
	// store deadline would be: errors during the failover end within it.
	failoverCallTimeout = 250 * time.Millisecond
)

// failoverLoad calls a store continuously on a set of identities and keeps,
// per identity, what the callers were told.
type failoverLoad struct {
	st   *Redis
	ids  []string
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	admitted []int64 // per identity: decisions Allowed
	events   []loadEvent
}

// loadEvent is one decision's end: its identity and its error, if any.
type loadEvent struct {
	id  int
	end time.Time
	err error
}

// startFailoverLoad runs failoverCallers callers deciding on ids in turn,
// each decision under a deadline of timeout, until finish.
func startFailoverLoad(st *Redis, ids []string, timeout time.Duration) *failoverLoad {
	l := &failoverLoad{st: st, ids: ids, stop: make(chan struct{}), admitted: make([]int64, len(ids))}
	for g := range failoverCallers {
		l.wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := i % len(ids)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				d, err := st.Allow(ctx, tollgate.Request{Key: ids[id], Limit: failoverLimit})
				cancel()
				l.mu.Lock()
				l.events = append(l.events, loadEvent{id: id, end: time.Now(), err: err})
				if err == nil && d.Allowed {
					l.admitted[id]++
				}
				l.mu.Unlock()
				if err != nil {
					// A failing store answers fast; do not spin on it.
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	return l
}

func (l *failoverLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// servedSince reports whether every identity in ids had a decision without
// error that ended after since.
func (l *failoverLoad) servedSince(since time.Time, ids []int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := map[int]bool{}
	for _, e := range l.events {
		if e.err == nil && e.end.After(since) {
			ok[e.id] = true
		}
	}
	for _, id := range ids {
		if !ok[id] {
			return false
		}
	}
	return true
}

// failoverReport is what a failover cost, from the callers' side.
type failoverReport struct {
	decisions, errors int
	kinds             map[string]int
	errorsOn          map[int]int // per identity
	first, last       time.Time   // the first and last decisions' ends
	lastError         time.Time   // zero when there was none
}

// errorsAmong adds the errors of the identities in ids.
func (r failoverReport) errorsAmong(ids []int) int {
	n := 0
	for _, id := range ids {
		n += r.errorsOn[id]
	}
	return n
}

// lastErrorSince returns how long after from the last error ended, or "none".
func (r failoverReport) lastErrorSince(from time.Time) string {
	if r.lastError.IsZero() {
		return "none"
	}
	return r.lastError.Sub(from).Round(time.Millisecond).String()
}

// rate returns the decisions made per second.
func (r failoverReport) rate() float64 {
	return float64(r.decisions) / r.last.Sub(r.first).Seconds()
}

// report summarises the decisions made.
func (l *failoverLoad) report() failoverReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := failoverReport{kinds: map[string]int{}, errorsOn: map[int]int{}}
	for _, e := range l.events {
		r.decisions++
		if r.first.IsZero() || e.end.Before(r.first) {
			r.first = e.end
		}
		if r.last.Before(e.end) {
			r.last = e.end
		}
		if e.err != nil {
			r.errors++
			r.errorsOn[e.id]++
			r.kinds[errorKind(e.err)]++
			if e.end.After(r.lastError) {
				r.lastError = e.end
			}
		}
	}
	return r
}

// errorKind names an error for a report by the Redis error code or the
// network failure it carries.
func errorKind(err error) string {
	s := err.Error()
	for _, k := range []string{"NOSCRIPT", "CLUSTERDOWN", "READONLY", "MOVED", "TRYAGAIN", "LOADING",
		"connection refused", "connection reset", "EOF", "i/o timeout", "context deadline exceeded", "redis: connection pool"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "context deadline exceeded"
	}
	return s
}

// lostWrites asks every identity once more and compares what Redis kept
// with what the callers were told: for each identity, units admitted minus
// units debited in Redis. Positive is over-admission (admissions whose write
// was lost); negative is debits the callers never learned of (a reply lost
// after the script ran).
func (l *failoverLoad) lostWrites(t *testing.T) []int64 {
	t.Helper()
	out := make([]int64, len(l.ids))
	for i, id := range l.ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := l.st.Allow(ctx, tollgate.Request{Key: id, Limit: failoverLimit})
		cancel()
		if err != nil {
			t.Fatalf("identity %q after the failover: %v", id, err)
		}
		if !d.Allowed {
			t.Fatalf("identity %q ran out of its %d units: the load was too heavy to account for", id, failoverLimit.Burst)
		}
		debited := failoverLimit.Burst - 1 - d.Remaining
		out[i] = l.admitted[i] - debited
	}
	return out
}

// awaitServed waits, for at most timeout, until every identity in ids has
// been decided without error after since.
func (l *failoverLoad) awaitServed(t *testing.T, since time.Time, ids []int, timeout time.Duration) {
	t.Helper()
	if !redistest.Await(timeout, func() bool { return l.servedSince(since, ids) }) {
		l.finish()
		r := l.report()
		t.Fatalf("identities %v not served within %s of %s; errors %v", ids, timeout, since.Format(time.StampMilli), r.kinds)
	}
}

// loadWarmUp is how many decisions of each identity show that a load runs
// before a test hurts the server.
const loadWarmUp = 10

// awaitDecided waits until every identity has been decided, with or
// without an error, n times after since: the load ran that long, however
// fast the machine is. Identities are decided 30 to 500 times a second
// each on a busy 2-core machine, depending on the test.
func (l *failoverLoad) awaitDecided(t *testing.T, since time.Time, n int) {
	t.Helper()
	decided := func() (least int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		per := make([]int, len(l.ids))
		for _, e := range l.events {
			if e.end.After(since) {
				per[e.id]++
			}
		}
		return slices.Min(per)
	}
	if !redistest.Await(20*time.Second, func() bool { return decided() >= n }) {
		l.finish()
		t.Fatalf("an identity decided %d times in 20s after %s, want %d: the load does not run", decided(), since.Format(time.StampMilli), n)
	}
}

// sum adds v's values for the identities in ids.
func sum(v []int64, ids []int) (over, under int64) {
	for _, id := range ids {
		if v[id] > 0 {
			over += v[id]
		} else {
			under -= v[id]
		}
	}
	return over, under
}

// clusterStore returns a client of cl whose store deadlines reach the
// socket (closed when the test ends), and a store on it under a prefix of
// the test's own.
func clusterStore(t *testing.T, cl *redistest.Cluster, opts ...RedisOption) (*redis.ClusterClient, *Redis, string) {
	o := cl.Options()
	o.ContextTimeoutEnabled = true
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	prefix := redistest.KeyPrefix(t)
	return cc, newRedis(t, cc, append([]RedisOption{WithPrefix(prefix)}, opts...)...), prefix
}

// identitiesOnPrimaries returns 24 identities and, for each, the address of
// the primary serving its state key under prefix.
func identitiesOnPrimaries(t *testing.T, cc *redis.ClusterClient, st *Redis) (ids, primaryOf []string) {
	t.Helper()
	ids = make([]string, 24)
	primaryOf = make([]string, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("tenant-%d", i)
		m, err := cc.MasterForKey(context.Background(), decisionKeys(st.keyPrefix(ids[i]), failoverLimit.Algorithm, ids[i], "")[0])
		if err != nil {
			t.Fatal(err)
		}
		primaryOf[i] = m.Options().Addr
	}
	return ids, primaryOf
}

// splitByPrimary returns the indexes of the identities served by the
// primary at addr and of the others; it fails the test when either is
// empty, which would prove nothing.
func splitByPrimary(t *testing.T, primaryOf []string, addr string) (affected, survivors []int) {
	t.Helper()
	for i, p := range primaryOf {
		if p == addr {
			affected = append(affected, i)
		} else {
			survivors = append(survivors, i)
		}
	}
	if len(affected) == 0 || len(survivors) == 0 {
		t.Fatalf("%d identities on %s and %d on the other primaries: the split proves nothing", len(affected), addr, len(survivors))
	}
	return affected, survivors
}

// TestClusterSlowPrimaryHoldsOnlyItsOwn puts one primary of a Cluster to
// sleep (DEBUG SLEEP, 1.5s) under load, with a cluster-node-timeout long
// enough that no failover starts, and checks that only the decisions whose
// keys it serves fail: each primary has round trips of its own, so no
// pipeline carrying other primaries' decisions waits on it. Decisions get
// 1s, so that only a stall that long could fail an awake primary's.
func TestClusterSlowPrimaryHoldsOnlyItsOwn(t *testing.T) {
	cl := redistest.NewClusterTimeout(t, 0, 15*time.Second) // private: a primary is put to sleep
	cc, st, _ := clusterStore(t, cl)
	ids, primaryOf := identitiesOnPrimaries(t, cc, st)
	victim := cl.Node(primaryOf[0])
	affected, survivors := splitByPrimary(t, primaryOf, victim.Addr())

	load := startFailoverLoad(st, ids, time.Second)
	load.awaitDecided(t, time.Time{}, loadWarmUp)
	woke := victim.Sleep(t, 1500*time.Millisecond)
	if err := <-woke; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	load.awaitDecided(t, time.Now(), 10) // the load goes on once the primary is awake
	load.finish()

	r := load.report()
	t.Logf("%d decisions (%.0f/s) on %d identities, one primary asleep 1.5s: %d errors on its %d identities, %d on the %d others: %v",
		r.decisions, r.rate(), len(ids), r.errorsAmong(affected), len(affected), r.errorsAmong(survivors), len(survivors), r.kinds)
	if r.errorsAmong(affected) == 0 {
		t.Fatal("no decision on the sleeping primary failed: the test proves nothing")
	}
	if n := r.errorsAmong(survivors); n != 0 {
		t.Errorf("%d decisions on primaries that were awake failed: they waited on the sleeping one", n)
	}
}

// TestClusterFailoverUnderLoad kills (SIGKILL) one primary of a 3-primary
// Cluster with one replica each while 8 goroutines make decisions on 24
// identities, and checks that the store serves every identity again once
// the replica is promoted, with the scripts loaded on it as the client
// connects (at most one NOSCRIPT there, never surfaced), and that no identity on a surviving
// primary is over-admitted. It reports the errors seen, the time to recover
// and the admissions whose writes the asynchronous failover lost.
//
// go test -v -run ClusterFailoverUnderLoad ./store prints the figures.
func TestClusterFailoverUnderLoad(t *testing.T) {
	t.Run("default", func(t *testing.T) { clusterFailover(t) })
	t.Run("tagged", func(t *testing.T) { clusterFailover(t, WithClusterTags(6)) })
}

func clusterFailover(t *testing.T, opts ...RedisOption) {
	cl := redistest.NewClusterTimeout(t, 1, time.Second)
	redistest.LetDialProbesEnd(t) // a client of the killed primary may have started one
	cc, st, _ := clusterStore(t, cl, opts...)
	ctx := context.Background()

	ids, primaryOf := identitiesOnPrimaries(t, cc, st)
	victim := cl.Node(primaryOf[0])
	replica := cl.ReplicaOf(t, victim)
	// The replica receives the stream only once it has acknowledged its
	// sync (REPLCONF ACK, about once a second); wait for that, so that the
	// lost writes measured are the failover's, not the sync's.
	vc := victim.Client(t).Conn()
	synced := decisionKeys(st.keyPrefix(ids[0]), failoverLimit.Algorithm, ids[0], "")[0] + ":synced"
	if err := vc.Set(ctx, synced, 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := vc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the primary to kill = %d, %v: its replica does not acknowledge", n, err)
	}
	_ = vc.Close()
	affected, survivors := splitByPrimary(t, primaryOf, victim.Addr())

	load := startFailoverLoad(st, ids, failoverCallTimeout)
	load.awaitDecided(t, time.Time{}, loadWarmUp)
	killed := time.Now()
	victim.Stop(t)
	promoted := cl.AwaitPromoted(t, replica, 20*time.Second)
	load.awaitServed(t, promoted, affected, 10*time.Second)
	load.awaitDecided(t, time.Now(), 20) // served steadily, not once
	load.finish()

	r := load.report()
	lost := load.lostWrites(t)
	overA, underA := sum(lost, affected)
	overS, underS := sum(lost, survivors)
	noscript := replica.ErrorCount(t, "NOSCRIPT")
	t.Logf("%d decisions (%.0f/s) on %d identities (%d on the killed primary), %d errors (%d on the killed primary's identities, %d on the others): %v",
		r.decisions, r.rate(), len(ids), len(affected), r.errors, r.errorsAmong(affected), r.errorsAmong(survivors), r.kinds)
	t.Logf("replica promoted %s after the kill; last error %s after the kill, %s after the promotion",
		promoted.Sub(killed).Round(time.Millisecond), r.lastErrorSince(killed), r.lastErrorSince(promoted))
	t.Logf("killed primary's identities: %d units admitted whose debit the failover lost (over-admission), %d debited but never reported admitted",
		overA, underA)
	t.Logf("surviving primaries' identities: %d over-admitted, %d debited but never reported admitted", overS, underS)
	t.Logf("promoted replica answered NOSCRIPT %d times (the scripts are loaded at connect); NOSCRIPT errors surfaced: %d", noscript, r.kinds["NOSCRIPT"])

	if overS != 0 {
		t.Errorf("identities on surviving primaries were over-admitted by %d units: %v", overS, lost)
	}
	if noscript > 1 {
		t.Errorf("the promoted replica answered NOSCRIPT %d times: the scripts are loaded as the client connects, want at most 1", noscript)
	}
	if r.kinds["NOSCRIPT"] != 0 {
		t.Errorf("%d NOSCRIPT errors reached the caller", r.kinds["NOSCRIPT"])
	}
	// Routing follows the promotion at once (the store reloads the slot
	// map on a failure); 2s leaves room for a busy machine.
	if d := r.lastError.Sub(promoted); d > 2*time.Second {
		t.Errorf("errors went on %s after the promotion", d)
	}
}

// watchSwitch samples every 10ms, until stop is called, when replica first
// reports itself a primary and when oldPrimary last wrote a decision: the
// window in which a client still writes to a primary whose replica has
// already left it. Writes are counted, not script calls, because one script
// call may carry many decisions (the batch script): each admitted decision
// writes its state with one SET (and its request-id marker with another),
// which INFO commandstats counts inside scripts too.
func watchSwitch(oldPrimary, replica *redistest.Server) (stop func() (promoted, lastOldWrite time.Time, writesAfter int64)) {
	ctx := context.Background()
	oc := redis.NewClient(&redis.Options{Addr: oldPrimary.Addr(), MaxRetries: -1})
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	scripts := func() int64 {
		info, _ := oc.Info(ctx, "commandstats").Result()
		var calls int64
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_set:") {
				v, _, _ := strings.Cut(line, ",")
				_, n, _ := strings.Cut(v, "calls=")
				c, _ := strconv.ParseInt(n, 10, 64)
				calls += c
			}
		}
		return calls
	}
	var promoted, last time.Time
	var atPromotion int64
	prev := scripts()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			now := time.Now()
			if promoted.IsZero() {
				if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
					promoted, atPromotion = now, scripts()
				}
			}
			if c := scripts(); c != prev {
				prev, last = c, now
			}
		}
	})
	return func() (time.Time, time.Time, int64) {
		close(done)
		wg.Wait()
		after := scripts() - atPromotion
		_, _ = oc.Close(), rc.Close()
		return promoted, last, after
	}
}

// TestSentinelFailoverUnderLoad makes decisions through
// redis.NewFailoverClient on 24 identities while Sentinel switches the
// primary (SENTINEL FAILOVER: the replica is promoted, then the old primary
// is demoted and resynchronised from it), and checks that the store serves
// every identity from the new primary. It reports the errors seen, the time
// to recover and the admissions whose writes were lost: those made on the
// old primary after the replica stopped following it.
//
// go test -v -run SentinelFailoverUnderLoad ./store prints the figures.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Replica(t, primary)
	// A replica whose link is up after a diskless sync receives the stream
	// only once it has acknowledged (REPLCONF ACK, about once a second): a
	// failover before that loses everything since the sync, which is
	// Redis's doing and not what this test measures. WAIT needs a write of
	// this connection's to wait for.
	pc := primary.Client(t)
	if err := pc.Set(context.Background(), "synced", 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(context.Background(), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v: the replica does not acknowledge", n, err)
	}
	sentinel := redistest.Sentinel(t, primary)
	redistest.AwaitSentinelReplicas(t, sentinel, 1, 20*time.Second)
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            redistest.SentinelMaster,
		SentinelAddrs:         []string{sentinel.Addr()},
		ContextTimeoutEnabled: true,
	})
	defer c.Close()
	st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))

	ids := make([]string, 24)
	all := make([]int, len(ids))
	for i := range ids {
		ids[i], all[i] = fmt.Sprintf("tenant-%d", i), i
	}
	load := startFailoverLoad(st, ids, failoverCallTimeout)
	load.awaitDecided(t, time.Time{}, loadWarmUp)
	watch := watchSwitch(primary, replica)
	switched := time.Now()
	redistest.SentinelFailover(t, sentinel)
	addr, named := redistest.AwaitSentinelPrimary(t, sentinel, primary.Addr(), 20*time.Second)
	if addr != replica.Addr() {
		t.Fatalf("Sentinel named %s, want the replica %s", addr, replica.Addr())
	}
	load.awaitServed(t, named, all, 10*time.Second)
	load.awaitDecided(t, time.Now(), 100) // served steadily, not once
	load.finish()
	promoted, lastOld, oldWrites := watch()
	// Sentinel demotes the old primary only some seconds after the switch
	// (it waits for it to report its role again); until then a client that
	// missed the switch could still write there.
	oldRole := primary.Info(t, "replication", "role")

	r := load.report()
	lost := load.lostWrites(t)
	over, under := sum(lost, all)
	t.Logf("%d decisions (%.0f/s) on %d identities, %d errors: %v", r.decisions, r.rate(), len(ids), r.errors, r.kinds)
	t.Logf("the replica reported itself primary %s after SENTINEL FAILOVER, Sentinel named it after %s, the old primary wrote %d decisions after the promotion, its last after %s (still %q at the end); last error: %s after the command",
		promoted.Sub(switched).Round(time.Millisecond), named.Sub(switched).Round(time.Millisecond),
		oldWrites, lastOld.Sub(switched).Round(time.Millisecond), oldRole, r.lastErrorSince(switched))
	t.Logf("%d units admitted whose debit the switch lost (over-admission: %.0fms of decisions at this rate), %d debited but never reported admitted; per identity %v",
		over, float64(over)/r.rate()*1000, under, lost)
	// The only admissions lost are the old primary's writes after the
	// promotion (sampled every 10ms: allow 50ms of decisions for the edges).
	if float64(over) > float64(oldWrites)+0.05*r.rate() {
		t.Errorf("%d units over-admitted, more than the %d decisions the old primary wrote after the promotion", over, oldWrites)
	}
	if r.kinds["NOSCRIPT"] != 0 {
		t.Errorf("%d NOSCRIPT errors reached the caller", r.kinds["NOSCRIPT"])
	}
	if n := replica.ErrorCount(t, "NOSCRIPT"); n > 1 {
		t.Errorf("the new primary answered NOSCRIPT %d times: the scripts are loaded as the client connects, want at most 1", n)
	}
}

// TestClusterReshardUnderLoad moves slots 0 to 900 from the first primary
// to the second with redis-cli --cluster reshard while 8 callers decide on
// 24 identities, 8 of them on the slots that move (with 2000 idle
// identities' states moving beside them), in the default layout
// and in the tagged one (WithClusterTags(3): shared tag 0 is on slot 900,
// so all its identities move while they share batch script calls). No identity is over-admitted; a decision that fails during the
// move (its outcome unknown to its caller) debits at most its cost; and
// every moved identity is served from its new primary afterwards.
//
// go test -v -run ClusterReshardUnderLoad ./store prints the figures.
func TestClusterReshardUnderLoad(t *testing.T) {
	for _, layout := range []struct {
		name string
		opts []RedisOption
	}{{"default", nil}, {"tagged", []RedisOption{WithClusterTags(3)}}} {
		t.Run(layout.name, func(t *testing.T) {
			cl := redistest.NewCluster(t, 0)
			o := cl.Options()
			o.ContextTimeoutEnabled = true
			cc := redis.NewClusterClient(o)
			t.Cleanup(func() { _ = cc.Close() })
			st := newRedis(t, cc, append([]RedisOption{WithPrefix(redistest.KeyPrefix(t))}, layout.opts...)...)
			const moved = 901 // slots 0..900 move
			var ids []string
			var moving []int
			for i := 0; len(ids) < 24; i++ {
				id := fmt.Sprintf("tenant-%d", i)
				on := slot(decisionKeys(st.keyPrefix(id), failoverLimit.Algorithm, id, "")[0]) < moved
				if on && len(moving) < 8 || !on && len(ids)-len(moving) < 16 {
					if on {
						moving = append(moving, len(ids))
					}
					ids = append(ids, id)
				}
			}
			ctx := context.Background()
			// 2000 more identities with state on the slots that move, so
			// that the move takes a while (redis-cli migrates 10 keys at a
			// time) and decisions meet a slot half moved.
			var idle []string
			for i := 0; len(idle) < 2000; i++ {
				id := fmt.Sprintf("idle-%d", i)
				if slot(decisionKeys(st.keyPrefix(id), failoverLimit.Algorithm, id, "")[0]) < moved {
					idle = append(idle, id)
				}
			}
			var fill sync.WaitGroup
			for g := range 16 {
				fill.Go(func() {
					for i := g; i < len(idle); i += 16 {
						if _, err := st.Allow(ctx, tollgate.Request{Key: idle[i], Limit: failoverLimit}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			fill.Wait()
			nodeID := func(s *redistest.Server) string {
				id, err := s.Client(t).Do(ctx, "CLUSTER", "MYID").Text()
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			from, to := nodeID(cl.Nodes[0]), nodeID(cl.Nodes[1])

			load := startFailoverLoad(st, ids, failoverCallTimeout)
			load.awaitDecided(t, time.Time{}, loadWarmUp)
			began := time.Now()
			out, err := exec.Command("redis-cli", "--cluster", "reshard", cl.Nodes[0].Addr(),
				"--cluster-from", from, "--cluster-to", to, "--cluster-slots", strconv.Itoa(moved), "--cluster-yes").CombinedOutput()
			if err != nil {
				load.finish()
				t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
			}
			ended := time.Now()
			load.awaitServed(t, ended, moving, 10*time.Second)
			load.awaitDecided(t, time.Now(), 20) // the moved identities stay served
			load.finish()

			if owner, err := cc.MasterForKey(ctx, decisionKeys(st.keyPrefix(ids[moving[0]]), failoverLimit.Algorithm, ids[moving[0]], "")[0]); err != nil || owner.Options().Addr != cl.Nodes[1].Addr() {
				t.Fatalf("after the reshard identity %q is served by %v (%v), want %s", ids[moving[0]], owner, err, cl.Nodes[1].Addr())
			}
			r := load.report()
			lost := load.lostWrites(t)
			over, under := sum(lost, moving)
			overOthers, underOthers := sum(lost, func() (all []int) {
				for i := range ids {
					if !slices.Contains(moving, i) {
						all = append(all, i)
					}
				}
				return all
			}())
			t.Logf("%d decisions (%.0f/s) on %d identities (%d on the %d slots moved in %s), %d errors (%d on the moved identities): %v",
				r.decisions, r.rate(), len(ids), len(moving), moved, ended.Sub(began).Round(time.Millisecond), r.errors, r.errorsAmong(moving), r.kinds)
			t.Logf("moved identities: %d units over-admitted, %d debited but never reported admitted; the others: %d and %d",
				over, under, overOthers, underOthers)
			if over != 0 || overOthers != 0 {
				t.Errorf("over-admission across the reshard: %v", lost)
			}
			for i, l := range lost {
				if -l > int64(r.errorsOn[i]) {
					t.Errorf("identity %q: %d units debited but never reported, beyond its %d failed decisions", ids[i], -l, r.errorsOn[i])
				}
			}
		})
	}
}
