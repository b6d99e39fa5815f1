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
	running atomic.Bool
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

// ensureRunning starts the goroutine unless it runs: an admission reads
// one atomic flag. The goroutine clears the flag before it looks at the
// journal a last time, and an admission adds its entry before it reads the
// flag, so one of them sees the other.
func (w *watcher) ensureRunning() {
	if w.running.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running.Load() || w.closed {
		return
	}
	w.running.Store(true)
	w.wg.Add(1)
	go w.run()
}

func (w *watcher) nudge() {
	select {
	case w.nudged <- struct{}{}:
	default:
	}
}

// shut turns the journal off and stops the watcher's goroutine, once.
func (w *watcher) shut() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.off.Store(true)
		close(w.stop)
	}
	w.mu.Unlock()
}

func (w *watcher) close(ctx context.Context) error {
	w.shut()
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
			closed := w.closed
			if closed {
				w.j.clear()
			}
			w.running.Store(false)
			w.mu.Unlock()
			if !closed && w.j.len() > 0 {
				w.ensureRunning() // an admission came in meanwhile
			}
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
		w.shut()
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
		if listed[node] || len(listed) == 0 {
			// Listed, or no list at all: the slot map could not be read
			// (the Cluster down), which says nothing of any primary.
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
