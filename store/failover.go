package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/store/internal/failover"
	"github.com/tollgate/tollgate/telemetry"
)

// DefaultJournalWindow is the longest a Redis store keeps a write in its
// failover journal (see WithJournal) when the replicas of its primary have
// not acknowledged it sooner: replicas acknowledge about once a second,
// and Redis's own bound on a replica's lag for writes to go on
// (min-replicas-max-lag) is 10s by default.
const DefaultJournalWindow = 10 * time.Second

// DefaultJournalBytes is the most memory a failover journal holds (see
// WithJournalBytes), 48 MiB: at about 200 bytes a write, a quarter of a
// million writes, the whole window at 25,000 writes a second with no
// replica acknowledging.
const DefaultJournalBytes = failover.DefaultMaxBytes

// WithJournal sets how long a Redis store keeps each write, at most, to
// restore it after a failover (default DefaultJournalWindow); 0 turns the
// journal off.
//
// With the journal on, every state the store writes carries its lineage
// (the primary that wrote it and a sequence), and the store keeps each
// write it made (decisions, settlements, overdraws, seats, and the
// request-id markers and records beside them) until every replica of the
// primary that made it has acknowledged it. When the store meets a new
// primary (a replica promoted by Sentinel or a Cluster, another server
// behind the same address), it restores there, before any decision runs
// there, exactly the writes the new primary lacks: the restore script
// compares each write with its key's lineage. docs/reliability.md has the
// design and what remains. A write older than window is forgotten even
// when no replica acknowledged it: window should exceed the replicas' lag.
// A negative window is an error.
func WithJournal(window time.Duration) RedisOption {
	if window < 0 {
		return badOption{invalidOption("WithJournal", window, "0 (off) or more")}
	}
	return redisOption(func(r *Redis) { r.journalWindow = window })
}

// WithJournalBytes caps the memory of the failover journal (default
// DefaultJournalBytes). Past it the oldest writes are dropped, each logged
// and counted (RedisStats.JournalDropped): a write dropped before its
// replicas acknowledged it is forgotten if its primary is lost. A cap
// below 1 MiB is an error.
func WithJournalBytes(n int64) RedisOption {
	if n < 1<<20 {
		return badOption{invalidOption("WithJournalBytes", n, "1 MiB (1048576) or more")}
	}
	return redisOption(func(r *Redis) { r.journalBytes = n })
}

// RedisStats counts what a Redis store did about failovers. Every store on
// one client shares the client's journal: their figures are the client's.
type RedisStats struct {
	// NoScript counts the NOSCRIPT replies of the store's client (shared
	// by every store on one client): the store loads its scripts on each
	// new connection, so this stays at 0 unless a server's scripts are
	// flushed under an open connection (SCRIPT FLUSH).
	NoScript int64
	// PrimaryChanges counts the primaries the store met replacing another
	// (a promoted replica, a restart).
	PrimaryChanges int64
	// Restored counts writes restored on a new primary that lacked them,
	// and RestoredUnits their units.
	Restored, RestoredUnits int64
	// Held counts writes a new primary was shown to hold (by their keys'
	// lineage) or that every replica acknowledged: never restored.
	Held int64
	// JournalExpired counts writes that left the journal older than its
	// window, unacknowledged; JournalDropped those dropped for its memory
	// cap.
	JournalExpired, JournalDropped int64
	// Journal is how many writes the journal holds now, and JournalBytes
	// their memory.
	Journal      int
	JournalBytes int64
}

// Stats returns what the store did about failovers so far.
func (r *Redis) Stats() RedisStats {
	s := RedisStats{NoScript: r.hooks.noScript.Load()}
	if f := r.failover; f != nil {
		c := f.journal.Counts()
		s.PrimaryChanges = f.changes()
		s.Restored, s.RestoredUnits, s.Held = c.Restored, f.restoredUnits.Load(), c.Held
		s.JournalExpired, s.JournalDropped = c.Expired, c.Dropped
		s.Journal, s.JournalBytes = f.journal.Len(), f.journal.Bytes()
	}
	return s
}

// Close stops the goroutine the store's failover journal runs while it
// holds writes, once every store sharing the client's journal is closed,
// waiting for it at most until ctx ends; it does not close the client.
// The store still decides after Close, without a journal. Close returns
// ctx's error if the goroutine did not stop in time.
func (r *Redis) Close(ctx context.Context) error {
	f := r.failover
	if f == nil {
		return nil
	}
	r.closeOnce.Do(func() {
		f.mu.Lock()
		f.stores--
		r.lastStore = f.stores == 0
		f.mu.Unlock()
	})
	if !r.lastStore {
		return nil
	}
	if err := f.watcher.Close(ctx); err != nil {
		return err
	}
	for _, g := range f.allGates() {
		if err := g.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// clientFailover is the failover machinery of one client, shared by every
// store on it (store/internal/failover): the journal, the gate of each
// primary, and the watcher.
type clientFailover struct {
	journal *failover.Journal
	watcher *failover.Watcher
	send    sender
	// id names this process's restore records (lua/doc.go, Restore), which
	// live recordTTL.
	id        string
	recordTTL time.Duration
	log       *slog.Logger
	blind     sync.Once // the warning that a server refuses INFO, once

	mu     sync.Mutex
	gates  map[string]*failover.Gate // by node address; "" for a *redis.Client's one server
	hooked map[*redis.Client]bool    // the clients a gate is on
	stores int                       // stores sharing it, not closed

	restoredUnits atomic.Int64
}

// startJournal sets up the hooks and, unless WithJournal turned it off or
// the client is a Ring (whose shards fail over each on its own), the
// client's failover machinery, shared with the other stores on the client.
func (r *Redis) startJournal() {
	r.hooks = hooksFor(r.client)
	if r.journalWindow <= 0 {
		return
	}
	switch r.client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return
	}
	r.failover = r.hooks.failoverFor(r)
}

// changes counts the primaries the gates found replacing another era.
func (f *clientFailover) changes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, g := range f.gates {
		n += g.Changes()
	}
	return n
}

// gate returns node's gate, nil when it has none.
func (f *clientFailover) gate(node string) *failover.Gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gates[node]
}

// allGates lists every gate.
func (f *clientFailover) allGates() []*failover.Gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*failover.Gate, 0, len(f.gates))
	for _, g := range f.gates {
		out = append(out, g)
	}
	return out
}

// add journals e, unless the journal was closed.
func (f *clientFailover) add(e failover.Entry) {
	if f == nil || f.watcher.Off() || e.Era == "" {
		return
	}
	f.journal.Add(e)
	f.watcher.Ensure()
}

// notRun reports whether err says a script call was not run, so that it
// can be sent again: its server is no longer a primary (READONLY: no write
// succeeds on a replica, and the batch script fails as a whole on its
// first), or the failover gate stopped it before it was written.
func notRun(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "READONLY") ||
		errors.Is(err, failover.ErrServerChanged) || errors.Is(err, failover.ErrNotPrimary))
}

// maxNotRunRetries is how many times a script call that was not run is
// sent again: each READONLY closes one connection to the demoted primary,
// and the pool may hold a few.
const maxNotRunRetries = 3

// drops reports the writes the journal drops for its memory cap: each in
// the telemetry.MetricJournalDropped counter, and in a warning at most
// once a second, with how many since the last.
type drops struct {
	log     *slog.Logger
	counter metric.Int64Counter

	mu      sync.Mutex
	last    time.Time
	pending int
}

func newDrops(log *slog.Logger, mp metric.MeterProvider) *drops {
	if log == nil {
		log = slog.Default()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, _ := mp.Meter("github.com/tollgate/tollgate/store").Int64Counter(telemetry.MetricJournalDropped,
		metric.WithUnit("{write}"),
		metric.WithDescription("Writes the failover journal dropped for its memory cap: each is forgotten if its primary is lost before a replica received it"))
	return &drops{log: log, counter: c}
}

// note reports n writes dropped by a journal holding maxBytes.
func (d *drops) note(n int, maxBytes int64) {
	if d.counter != nil {
		d.counter.Add(context.Background(), int64(n))
	}
	d.mu.Lock()
	d.pending += n
	now := time.Now()
	if now.Sub(d.last) < time.Second {
		d.mu.Unlock()
		return
	}
	pending := d.pending
	d.last, d.pending = now, 0
	d.mu.Unlock()
	d.log.Warn("tollgate: redis store: the failover journal is full: writes no replica has acknowledged are dropped, and forgotten if their primary is lost (a replica stopped or far behind? docs/reliability.md#failovers)",
		"dropped", pending, "journal.bytes", maxBytes)
}
