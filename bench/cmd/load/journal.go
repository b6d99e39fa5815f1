package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// journalCallers is the concurrency of the journal cells.
const journalCallers = 64

// journalSubject is tollgate's token bucket with the failover journal on
// (the default) or off, on a client newClient makes; peak receives, for
// the journal, the most writes and bytes it held during a cell.
func journalSubject(name string, on bool, peak *journalPeak, newClient func() redis.UniversalClient) subject {
	return subject{name: name, reference: !on, make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := newClient()
		opts := []store.RedisOption{store.WithPrefix(prefix())}
		if !on {
			opts = append(opts, store.WithJournal(0))
		}
		st, err := redisStore(c, opts...)
		if err != nil {
			return nil, nil, err
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if on {
			wg.Go(func() { peak.watch(st, stop) })
		}
		release := func() {
			close(stop)
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = st.Close(ctx)
			_ = c.Close()
		}
		return bench.Tollgate{Store: st, Limit: limit(tollgate.TokenBucket)}, release, nil
	}}
}

// journalPeak is the largest journal seen, over every cell.
type journalPeak struct {
	mu             sync.Mutex
	entries, bytes []float64 // per cell
}

func (p *journalPeak) watch(st *store.Redis, stop <-chan struct{}) {
	var entries, bytes int64
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			p.mu.Lock()
			p.entries, p.bytes = append(p.entries, float64(entries)), append(p.bytes, float64(bytes))
			p.mu.Unlock()
			return
		case <-t.C:
		}
		s := st.Stats()
		entries, bytes = max(entries, int64(s.Journal)), max(bytes, s.JournalBytes)
	}
}

// journalSection measures the failover journal's cost: the token bucket
// with it and without it, alternating -reps times, journalCallers callers
// on -identities identities, on the measured Redis with a replica of its
// own attached (so that admissions stay in the journal until the replica
// acknowledges them, as in production). It returns the rows and a note
// with the journal's peak size.
func (m *measurer) journalSection(ctx context.Context) ([]row, []string, error) {
	replica, err := m.startReplica(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	defer replica.Close()
	ids := make([]string, m.cfg.identities)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	var rows []row
	var notes []string
	compare := func(m *measurer, where string, newClient func() redis.UniversalClient) error {
		peak := &journalPeak{}
		subjects := []subject{
			journalSubject("tollgate token_bucket, journal off"+where, false, nil, newClient),
			journalSubject("tollgate token_bucket, journal on"+where, true, peak, newClient),
		}
		r, err := m.compare(ctx, "journal", "random", journalCallers, subjects, func(s subject) (*sample, error) {
			d, release, err := s.make(m, storeLimit)
			if err != nil {
				return nil, err
			}
			defer release()
			return m.cell(ctx, d, journalCallers, ids, false)
		})
		if err != nil {
			return err
		}
		rows = append(rows, r...)
		perSec := r[1].perSec
		notes = append(notes, fmt.Sprintf("journal%s: at %d callers (%.0f decisions/s, median), the journal held at most %.0f writes and %.0f bytes (medians of the cells' peaks), %.0f bytes per admitted decision per second",
			where, journalCallers, perSec, median(peak.entries), median(peak.bytes), median(peak.bytes)/perSec))
		return nil
	}
	if err := compare(m, "", func() redis.UniversalClient { return redis.NewClient(cloneOptions(m.opts)) }); err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "load: journal done")
	cl, replicas, err := bench.StartClusterWithReplicas(clusterPrimaries)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, r := range replicas {
			r.Close()
		}
		cl.Close()
	}()
	// Redis figures summed over the primaries, as the cluster section's.
	cm := &measurer{cfg: m.cfg, admin: m.admin, opts: m.opts}
	for _, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		defer c.Close()
		cm.nodes = append(cm.nodes, c)
	}
	if err := compare(cm, ", Cluster", func() redis.UniversalClient { return redis.NewClusterClient(cl.Options()) }); err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "load: journal on a Cluster done")
	return rows, notes, nil
}

// journalStall is how long the journalstall section keeps the replica
// frozen under load.
var journalStall = flag.Duration("stall", time.Minute, "journalstall: how long the replica stays frozen under load")

// journalStallSection measures what a frozen replica costs the process: a
// replica of its own attached to the measured Redis and frozen (SIGSTOP),
// journalCallers callers on -identities identities for -stall with the
// journal on, then as long with it off, the Go heap (HeapInuse, after a
// GC, every second) and the journal sampled. It returns a note.
func (m *measurer) journalStallSection(ctx context.Context) ([]string, error) {
	replica, err := m.startReplica(ctx)
	if err != nil {
		return nil, fmt.Errorf("journalstall: %w", err)
	}
	defer replica.Close()
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	defer func() { _ = replica.Signal(syscall.SIGCONT) }()
	ids := make([]string, m.cfg.identities)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	var notes []string
	for _, on := range []bool{true, false} {
		c := redis.NewClient(cloneOptions(m.opts))
		opts := []store.RedisOption{store.WithPrefix(prefix())}
		if !on {
			opts = append(opts, store.WithJournal(0))
		}
		st, err := redisStore(c, opts...)
		if err != nil {
			return nil, err
		}
		var heap, journal uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap, journal = max(heap, ms.HeapInuse), max(journal, uint64(st.Stats().JournalBytes))
			}
		})
		cfg := m.cfg
		m.cfg.d = *journalStall
		s, err := m.cell(ctx, bench.Tollgate{Store: st, Limit: storeLimit(tollgate.TokenBucket)}, journalCallers, ids, false)
		m.cfg = cfg
		close(stop)
		wg.Wait()
		stats := st.Stats()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = st.Close(cctx)
		cancel()
		_ = c.Close()
		if err != nil {
			return nil, err
		}
		notes = append(notes, fmt.Sprintf("journalstall: replica frozen, journal on=%v, %s at %d callers: %.0f decisions/s; Go heap in use at most %.1f MB; journal at most %.1f MB, %d writes dropped for its cap",
			on, *journalStall, journalCallers, s.perSec, float64(heap)/1e6, float64(journal)/1e6, stats.JournalDropped))
		fmt.Fprintln(os.Stderr, "load:", notes[len(notes)-1])
	}
	return notes, nil
}

// startReplica starts a redis-server replicating the measured one and
// returns once its link is up (within 10 s).
func (m *measurer) startReplica(ctx context.Context) (*bench.Server, error) {
	host, port, err := net.SplitHostPort(m.opts.Addr)
	if err != nil {
		return nil, err
	}
	replica, err := bench.StartRedis("--replicaof", host, port)
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return replica, nil
		}
		if time.Now().After(deadline) {
			replica.Close()
			return nil, fmt.Errorf("the replica %s of %s did not sync", replica.Addr, m.opts.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
