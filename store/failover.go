package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// DefaultJournalWindow is the longest a Redis store keeps an admission in
// its failover journal (see WithJournal) when the replicas of its primary
// have not acknowledged it sooner: replicas acknowledge about once a
// second, and Redis's own bound on a replica's lag for writes to go on
// (min-replicas-max-lag) is 10s by default.
const DefaultJournalWindow = 10 * time.Second

// journalProbeEvery is how often a store whose journal holds admissions
// reads INFO replication from its primaries: it bounds both how late a
// failover is seen and how many admissions of a replica in sync are
// debited twice after one (those since the last read).
const journalProbeEvery = 50 * time.Millisecond

// journalProbeTimeout bounds one round of INFO replication reads and of the
// replays that follow.
const journalProbeTimeout = time.Second

// replayChunk is the most identities one overdraw call of a replay carries.
const replayChunk = 64

// WithJournal sets how long a Redis store keeps each admission, at most, to
// debit it again after a failover (default DefaultJournalWindow); 0 turns
// the journal off.
//
// With the journal on, the store remembers what it admitted until every
// replica of the primary that admitted it has acknowledged it (it reads
// INFO replication every 50ms while it holds admissions). When it sees that
// the primary it writes to changed (a new replication id on its primary, or
// on a Cluster a new primary for the slots it wrote to), it debits again
// on the new primary every admission the new primary may lack, whether or
// not it fits (as a Request.Overdraw would): those the new primary's
// replication offset shows it received are not debited again, nor those
// whose request-id marker it holds; the others are, the safe side for
// those that did arrive. docs/reliability.md has what a failover can still
// over-admit. An admission older than window is forgotten even when no
// replica acknowledged it: window should exceed the replicas' lag.
func WithJournal(window time.Duration) RedisOption {
	return redisOption(func(r *Redis) { r.journalWindow = max(window, 0) })
}

// RedisStats counts what a Redis store did about failovers.
type RedisStats struct {
	// NoScript counts the NOSCRIPT replies of the store's client (shared
	// by every store on one client): the store loads its scripts on each
	// new connection, so this stays at 0 unless a server's scripts are
	// flushed under an open connection (SCRIPT FLUSH).
	NoScript int64
	// PrimaryChanges counts the times the store saw a primary it had
	// written to replaced: a new replication id, or a Cluster slot's new
	// primary.
	PrimaryChanges int64
	// Replayed counts admissions debited again on a new primary, and
	// ReplayedUnits their units.
	Replayed, ReplayedUnits int64
	// Replicated counts admissions a new primary was shown to hold (by
	// its replication offset or the request id's marker): not debited
	// again.
	Replicated int64
	// Journal is how many admissions the journal holds now, and
	// JournalBytes the memory it holds for them (its slice's capacity;
	// the identities and request ids are the callers' strings, shared).
	Journal      int
	JournalBytes int64
}

// Stats returns what the store did about failovers so far.
func (r *Redis) Stats() RedisStats {
	s := RedisStats{NoScript: r.hooks.noScript.Load()}
	if w := r.failover; w != nil {
		s.PrimaryChanges, s.Replayed, s.ReplayedUnits = w.changes.Load(), w.replayed.Load(), w.replayedUnits.Load()
		s.Replicated, s.Journal, s.JournalBytes = w.replicated.Load(), w.j.len(), w.j.bytes()
	}
	return s
}

// Close stops the goroutine the store's failover journal runs while it
// holds admissions, waiting for it at most until ctx ends; it does not
// close the client. The store still decides after Close, without a
// journal. Close returns ctx's error if the goroutine did not stop in time.
func (r *Redis) Close(ctx context.Context) error {
	if r.failover == nil {
		return nil
	}
	return r.failover.close(ctx)
}

// startJournal sets up the hooks and, unless WithJournal turned it off or
// the client is a Ring (whose shards fail over each on its own), the
// journal and its watcher.
func (r *Redis) startJournal() {
	r.hooks = hooksFor(r.client)
	switch r.client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return
	}
	if r.journalWindow > 0 {
		r.failover = &watcher{r: r, j: newJournal(r.journalWindow), stop: make(chan struct{}), nudged: make(chan struct{}, 1),
			views: map[string]*nodeView{}, infos: map[string]replInfo{}, listed: map[string]bool{}, acked: map[string]uint64{}}
	}
}

// journalEpoch is the count of primary changes the store has seen, read
// as a decision starts and handed to journalAdmission as it ends.
func (r *Redis) journalEpoch() uint64 {
	if r.failover == nil {
		return 0
	}
	return r.failover.epoch.Load()
}

// journalAdmission records d, the store's answer to req (normalized), when
// it debited req. epoch is journalEpoch as the decision started: a
// decision sent before a primary change was seen may have been admitted
// by the old primary after its replica was promoted (a connection to it
// answers until the client closes it), so it is replayed on the new one.
func (r *Redis) journalAdmission(ctx context.Context, req tollgate.Request, d tollgate.Decision, epoch uint64) {
	w := r.failover
	if w == nil || !d.Allowed || d.Replayed || w.off.Load() {
		return
	}
	node := ""
	if r.cluster != nil {
		if m, err := r.cluster.MasterForKey(ctx, r.tagKey(req)); err == nil {
			node = m.Options().Addr
		}
	}
	w.j.add(req, d, node, epoch != w.epoch.Load())
	w.ensureRunning()
}

// journalAdmissions records the answers ds to a set reqs (see
// journalAdmission).
func (r *Redis) journalAdmissions(ctx context.Context, reqs []tollgate.Request, ds []tollgate.Decision, epoch uint64) {
	for i := range reqs {
		r.journalAdmission(ctx, reqs[i], ds[i], epoch)
	}
}

// tagKey is a key on req's Cluster slot: its state key.
func (r *Redis) tagKey(req tollgate.Request) string {
	return decisionKeys(r.keyPrefix(req.Key), req.Limit.Algorithm, req.Key, "")[0]
}

// leftDemoted reports whether err says the server that answered is no
// longer a primary (READONLY): go-redis has closed that connection, the
// script wrote nothing (no write succeeds on a replica), and the call can
// be sent again, on a new connection, to the new primary. It also has the
// journal check its primary at once.
func (r *Redis) leftDemoted(err error) bool {
	if err == nil || !redis.HasErrorPrefix(err, "READONLY") {
		return false
	}
	if w := r.failover; w != nil {
		w.nudge()
	}
	return true
}

// watcher runs a store's journal: while it holds admissions, one goroutine
// reads INFO replication from the primaries every journalProbeEvery (and
// at once when the client opens a connection or a decision meets a
// READONLY), forgets what the replicas acknowledged, and replays what a new
// primary lacks. It ends when the journal is empty, and starts again at the
// next admission.
type watcher struct {
	r *Redis
	j *journal

	mu      sync.Mutex
	running bool
	closed  bool
	stop    chan struct{}
	nudged  chan struct{} // capacity 1
	wg      sync.WaitGroup

	// views is what the goroutine knows of each primary, by node (the
	// address on a Cluster, "" otherwise). Only the running goroutine
	// touches it.
	views map[string]*nodeView
	// infos, listed and acked are a tick's reads, kept between ticks so
	// that a tick allocates little.
	infos  map[string]replInfo
	listed map[string]bool
	acked  map[string]uint64
	// connects is the count of new connections' reads last used.
	connects uint64

	off   atomic.Bool   // set once closed: admissions are no longer kept
	epoch atomic.Uint64 // primary changes seen (journalEpoch)

	changes, replayed, replayedUnits, replicated atomic.Int64
}

// nodeView is one primary's replication as the watcher last read it.
type nodeView struct {
	replid string
	// replicated is set once the primary was seen with a replica: when it
	// then has none, one may be taking over, and nothing is forgotten
	// until the window ends.
	replicated bool
	// superseded holds the replication ids this node had before: a read
	// showing one comes from an old primary, which is ignored.
	superseded map[string]bool
	// probes are recent reads: every admission up to seq was in the
	// primary's replication stream up to offset. Oldest first.
	probes []probe
}

type probe struct {
	seq    uint64
	offset int64
}

// replInfo is what INFO replication says of a server.
type replInfo struct {
	master          bool
	replid, replid2 string
	offset, second  int64 // master_repl_offset, second_repl_offset
	acked           int64 // the least offset its replicas acknowledged; offset with none
	replicas        int   // connected_slaves
}

func (w *watcher) ensureRunning() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running || w.closed {
		return
	}
	w.running = true
	w.wg.Add(1)
	go w.run()
}

func (w *watcher) nudge() {
	select {
	case w.nudged <- struct{}{}:
	default:
	}
}

func (w *watcher) close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.off.Store(true)
		close(w.stop)
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		w.j.clear()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *watcher) run() {
	defer w.wg.Done()
	t := time.NewTicker(journalProbeEvery)
	defer t.Stop()
	for {
		w.tick()
		w.mu.Lock()
		if w.closed || w.j.len() == 0 {
			if w.closed {
				w.j.clear()
			}
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		select {
		case <-w.stop:
		case <-t.C:
		case <-w.nudged:
		case <-w.r.hooks.connected():
		}
	}
}

// tick reads every primary's replication once, replays what a changed
// primary lacks and forgets what the replicas acknowledged.
func (w *watcher) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), journalProbeTimeout)
	defer cancel()
	seq := w.j.lastSeq()
	connect, connects := w.r.hooks.lastConnect()
	infos, listed, err := w.read(ctx)
	if errors.Is(err, redis.ErrClosed) {
		// The client was closed: nothing can be replayed through it.
		w.mu.Lock()
		if !w.closed {
			w.closed = true
			w.off.Store(true)
			close(w.stop)
		}
		w.mu.Unlock()
		return
	}
	w.observe(seq, infos, listed)
	if w.r.cluster == nil && connects != w.connects && connect.master {
		// A new connection's read, which a read through the pool (an
		// older connection) may not show yet.
		w.connects = connects
		one := map[string]replInfo{"": connect}
		w.observe(seq, one, listed)
		if inf, ok := one[""]; ok {
			infos[""] = inf
		}
	}
	w.replay(ctx)
	acked := w.acked
	clear(acked)
	for node, v := range w.views {
		inf, ok := infos[node]
		v.replicated = v.replicated || inf.replicas > 0
		if ok && (inf.replicas > 0 || !v.replicated) {
			acked[node] = v.ackedSeq(inf.acked)
		}
	}
	w.j.forget(acked)
}

// read returns INFO replication of each primary that answered, by node,
// and the nodes the client counts as primaries (answering or not).
func (w *watcher) read(ctx context.Context) (map[string]replInfo, map[string]bool, error) {
	infos, listed := w.infos, w.listed
	clear(infos)
	clear(listed)
	if w.r.cluster == nil {
		listed[""] = true
		s, err := w.r.client.Info(ctx, "replication").Result()
		if err == nil {
			if inf := parseReplication(s); inf.master {
				infos[""] = inf
			}
		}
		return infos, listed, err
	}
	var mu sync.Mutex
	err := w.r.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		mu.Lock()
		listed[addr] = true
		mu.Unlock()
		s, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if inf := parseReplication(s); inf.master {
			mu.Lock()
			infos[addr] = inf
			mu.Unlock()
		}
		return nil
	})
	return infos, listed, err
}

// observe compares what the primaries say with what was known of them, and
// flags for replay the admissions a new primary may lack: after a read
// with seq, every admission up to seq is on the primary read.
func (w *watcher) observe(seq uint64, infos map[string]replInfo, listed map[string]bool) {
	for node, inf := range infos {
		v := w.views[node]
		switch {
		case v != nil && v.superseded[inf.replid]:
			// An old primary still answering (a connection opened before
			// the switch): it is not where the store writes.
			delete(infos, node)
			continue
		case v == nil:
			v = &nodeView{replid: inf.replid}
			w.views[node] = v
		case v.replid != inf.replid:
			// The same address, another history: a replica promoted
			// behind it (DNS, a proxy, Sentinel's switch), or a restart.
			w.changes.Add(1)
			w.epoch.Add(1)
			w.j.mark(node, v.safeSeq(inf), seq)
			if v.superseded == nil {
				v.superseded = map[string]bool{}
			}
			v.superseded[v.replid] = true
			v.replid, v.probes, v.replicated = inf.replid, nil, false
		}
		v.probes = append(v.probes, probe{seq: seq, offset: inf.offset})
	}
	for node, v := range w.views {
		if listed[node] {
			continue
		}
		// A primary the Cluster no longer counts: its slots went to a
		// replica, whose replication id names this primary's as its
		// second when it was this primary's replica.
		safe := uint64(0)
		for _, inf := range infos {
			if inf.replid2 == v.replid {
				safe = v.safeSeq(inf)
			}
		}
		w.changes.Add(1)
		w.epoch.Add(1)
		w.j.mark(node, safe, ^uint64(0))
		ctx, cancel := context.WithTimeout(context.Background(), journalProbeTimeout)
		w.j.move(node, func(req tollgate.Request) string {
			if m, err := w.r.cluster.MasterForKey(ctx, w.r.tagKey(req)); err == nil {
				return m.Options().Addr
			}
			return node
		})
		cancel()
		delete(w.views, node)
	}
}

// safeSeq is the last admission known to be on a new primary described by
// inf, when it was v's replica: the latest read of v whose offset the new
// primary had reached when it was promoted. 0 when inf does not descend
// from v.
func (v *nodeView) safeSeq(inf replInfo) uint64 {
	var safe uint64
	if inf.replid2 != v.replid || v.replid == "" {
		return 0
	}
	for _, p := range v.probes {
		if p.offset < inf.second {
			safe = max(safe, p.seq)
		}
	}
	return safe
}

// ackedSeq is the last admission every replica has acknowledged, given the
// least offset acknowledged, and drops the reads before the one that
// shows it.
func (v *nodeView) ackedSeq(acked int64) uint64 {
	i := -1
	for k, p := range v.probes {
		if p.offset <= acked {
			i = k
		}
	}
	if i < 0 {
		return 0
	}
	seq := v.probes[i].seq
	v.probes = v.probes[i:]
	return seq
}

// replay debits again, on the primaries now serving them, the admissions
// flagged for replay: all at once per identity, whether or not they fit,
// except a fixed window's admission once its window has ended (it counts
// for nothing any more) and an admission whose request-id marker the new
// primary holds (it arrived). On an error the admissions stay flagged and
// the next tick tries again.
func (w *watcher) replay(ctx context.Context) {
	pending := w.j.pending()
	if len(pending) == 0 {
		return
	}
	done := make(map[uint64]bool, len(pending))
	now := time.Now().UnixMicro()
	var withID []int
	for i, e := range pending {
		switch {
		case e.end != 0 && e.end <= now:
			done[e.seq] = true
		case e.req.RequestID != "":
			withID = append(withID, i)
		}
	}
	if len(withID) > 0 {
		pipe := w.r.client.Pipeline()
		cmds := make([]*redis.IntCmd, len(withID))
		for k, i := range withID {
			req := pending[i].req
			cmds[k] = pipe.Exists(ctx, decisionKeys(w.r.keyPrefix(req.Key), req.Limit.Algorithm, req.Key, req.RequestID)[1])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return
		}
		for k, i := range withID {
			if cmds[k].Val() == 1 {
				done[pending[i].seq] = true
				w.replicated.Add(1)
			}
		}
	}
	type identity struct {
		key   string
		limit tollgate.Limit
	}
	units := map[identity]int64{}
	var order []identity
	for _, e := range pending {
		if done[e.seq] {
			continue
		}
		id := identity{e.req.Key, e.req.Limit}
		if _, ok := units[id]; !ok {
			order = append(order, id)
		}
		units[id] = min(units[id]+e.req.Cost, tollgate.MaxRate)
	}
	reqs := make([]tollgate.Request, 0, len(order))
	var total int64
	for _, id := range order {
		req, err := tollgate.Request{Key: id.key, Limit: id.limit, Cost: units[id], Overdraw: true}.Normalized()
		if err != nil {
			continue // a journaled request was valid: not reached
		}
		reqs = append(reqs, req)
		total += req.Cost
	}
	for len(reqs) > 0 {
		n := min(len(reqs), replayChunk)
		if _, err := w.r.overdraw(ctx, reqs[:n]); err != nil {
			return // not all replayed: the entries stay flagged, the units are counted again (the safe side)
		}
		reqs = reqs[n:]
	}
	for _, e := range pending {
		if !done[e.seq] {
			w.replayed.Add(1)
		}
		done[e.seq] = true
	}
	w.replayedUnits.Add(total)
	w.j.replayed(done)
}

// parseReplication reads the fields the journal needs from INFO
// replication.
func parseReplication(s string) replInfo {
	var inf replInfo
	slaves := int64(-1)
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "role":
			inf.master = v == "master"
		case k == "master_replid":
			inf.replid = v
		case k == "master_replid2":
			inf.replid2 = v
		case k == "master_repl_offset":
			inf.offset, _ = strconv.ParseInt(v, 10, 64)
		case k == "second_repl_offset":
			inf.second, _ = strconv.ParseInt(v, 10, 64)
		case k == "connected_slaves":
			inf.replicas, _ = strconv.Atoi(v)
		case strings.HasPrefix(k, "slave") && strings.Contains(v, "offset="):
			_, o, _ := strings.Cut(v, "offset=")
			o, _, _ = strings.Cut(o, ",")
			n, err := strconv.ParseInt(o, 10, 64)
			if err != nil {
				n = 0
			}
			if slaves < 0 || n < slaves {
				slaves = n
			}
		}
	}
	inf.acked = inf.offset
	if slaves >= 0 {
		inf.acked = slaves
	}
	return inf
}
