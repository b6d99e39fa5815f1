package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/lua"
	"github.com/tollgate/tollgate/store/internal/failover"
)

// defaultJournalWindow is the longest a Redis store keeps a write in its
// failover journal (see WithJournal) when the replicas of its primary have
// not acknowledged it sooner: replicas acknowledge about once a second,
// and Redis's own bound on a replica's lag for writes to go on
// (min-replicas-max-lag) is 10s by default.
const defaultJournalWindow = 10 * time.Second

// defaultJournalBytes is the most memory a failover journal holds (see
// WithJournalBytes), 48 MiB: at about 200 bytes a write, a quarter of a
// million writes, the whole window at 25,000 writes a second with no
// replica acknowledging.
const defaultJournalBytes = failover.DefaultMaxBytes

// WithJournal sets how long a Redis store keeps each write, at most, to
// restore it after a failover (default 10 s: replicas acknowledge about once a second, and
// Redis's min-replicas-max-lag is 10 s by default); 0 turns the journal off.
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
// A negative window, or one above 10 minutes, is an error.
func WithJournal(window time.Duration) RedisOption {
	if window < 0 || window > maxJournalWindow {
		return badOption{invalidOption("WithJournal", window, fmt.Sprintf("0 (off) to %s", maxJournalWindow))}
	}
	return redisOption(func(r *Redis) { r.journalWindow = window })
}

// maxJournalWindow is the longest window WithJournal takes: a slot's
// lineage lives at least 20 minutes after its last write (lua/doc.go,
// Lineage), longer than a write waits in the journal, its window and up to
// failover.MaxSilence (10 minutes) for a primary that stopped answering.
const maxJournalWindow = 10 * time.Minute

// Exactness says when a Redis store pays for exact failovers
// (docs/reliability.md#when-exactness-is-paid): the lineage its scripts
// write, the journal of its writes, the gate's restore before a new
// primary decides.
type Exactness int

const (
	// ExactWhenReplicated, the default, pays on each primary that has a
	// replica that could take over: INFO replication lists one, or a
	// Cluster lists one for the node, or did within the journal's window.
	// A primary without one (a single Redis) pays nothing: nothing could
	// take over from it. The store reads each primary every 50 ms while
	// it decides, and starts or stops paying as replicas come and go.
	ExactWhenReplicated Exactness = iota
	// ExactAlways pays on every primary, replica or not: for a replica the
	// primary does not list (behind a proxy that hides it).
	ExactAlways
	// ExactNever pays nowhere, as WithJournal(0): a failover forgets what
	// the replica had not received.
	ExactNever
)

// String names e as its constant does, without "Exact": "WhenReplicated",
// "Always" or "Never".
func (e Exactness) String() string {
	switch e {
	case ExactWhenReplicated:
		return "WhenReplicated"
	case ExactAlways:
		return "Always"
	case ExactNever:
		return "Never"
	}
	return fmt.Sprintf("Exactness(%d)", int(e))
}

// WithExactness sets when the store pays for exact failovers (default
// ExactWhenReplicated). Every store on one client shares the first one's
// choice, as it shares its journal. A value other than the three
// constants is an error.
func WithExactness(e Exactness) RedisOption {
	if e < ExactWhenReplicated || e > ExactNever {
		return badOption{invalidOption("WithExactness", e, "ExactWhenReplicated, ExactAlways or ExactNever")}
	}
	return redisOption(func(r *Redis) { r.exactness = e })
}

// WithJournalBytes caps the memory of the failover journal (default
// 48 MiB: about a quarter of a million writes). Past it the oldest writes are dropped, each logged
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
	// Primaries counts the primaries the store has verified, and
	// ExactPrimaries those of them it pays exactness on now (see
	// Exactness); ExactnessChanges counts the times a primary's exactness
	// changed (a replica attached, or gone longer than the journal's
	// window).
	Primaries, ExactPrimaries int
	ExactnessChanges          int64
	// Restored counts writes restored on a new primary that lacked them,
	// and RestoredUnits their units.
	Restored, RestoredUnits int64
	// Held counts writes a new primary was shown to hold (by their slots'
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
	if r.failover != nil {
		f := r.failover.Stats()
		s.PrimaryChanges, s.ExactnessChanges = f.PrimaryChanges, f.ModeChanges
		s.Primaries, s.ExactPrimaries = f.Exact+f.NotExact, f.Exact
		s.Restored, s.RestoredUnits, s.Held = f.Restored, f.RestoredUnits, f.Held
		s.JournalExpired, s.JournalDropped = f.Expired, f.Dropped
		s.Journal, s.JournalBytes = f.Journal, f.JournalBytes
	}
	return s
}

// Close stops the goroutine the store's failover machinery runs while the
// store decides or its journal holds writes, once every store sharing the
// client's machinery is closed, waiting for it at most until ctx ends; it
// does not close the client. The store still decides after Close, without
// a journal. Close returns ctx's error if the goroutine did not stop in
// time.
func (r *Redis) Close(ctx context.Context) error {
	f := r.failover
	if f == nil {
		return nil
	}
	r.closeOnce.Do(func() { r.lastStore = f.Detach() })
	if !r.lastStore {
		return nil
	}
	return f.Close(ctx)
}

// startFailover sets up the hooks and, unless the store pays for no
// exactness (ExactNever, WithJournal(0)) or the client is a Ring (whose
// shards fail over each on its own), the client's failover machinery,
// shared with the other stores on the client (store/internal/failover).
func (r *Redis) startFailover() {
	r.hooks = hooksFor(r.client)
	if r.journalWindow <= 0 || r.exactness == ExactNever {
		return
	}
	switch r.client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return
	}
	r.failover = r.hooks.failoverFor(r)
}

// failoverConfig is the machinery's configuration from r, the first store
// with one on its client.
func (r *Redis) failoverConfig() failover.Config {
	mode := failover.WhenReplicated
	if r.exactness == ExactAlways {
		mode = failover.Always
	}
	return failover.Config{
		Client: r.client, Cluster: r.cluster,
		Window: r.journalWindow, MaxBytes: r.journalBytes, Exactness: mode,
		Log: r.persistence.log, Meter: r.persistence.meter,
		Run: r.sender.run, Stamped: eraAt, SeatHoldTTL: seatHoldTTL,
	}
}

// run sends the failover machinery's script calls on the send path
// (roundTrip), and gives each its reply or error and the era it was
// stamped with.
func (s sender) run(ctx context.Context, calls []failover.ScriptCall) {
	sc := make([]scriptCall, 0, len(calls))
	var at []int
	for i, c := range calls {
		switch c.Script {
		case lua.Restore:
			sc = append(sc, scriptCall{script: restoreScript, args: c.Args})
		case lua.Seat:
			sc = append(sc, scriptCall{script: seatScript, args: c.Args})
		default:
			calls[i].Err = fmt.Errorf("tollgate: redis store: the failover machinery sends no %s script", c.Script)
			continue
		}
		at = append(at, i)
	}
	s.roundTrip(ctx, sc)
	for k, i := range at {
		calls[i].Reply, calls[i].Err = sc[k].cmd.(scriptCmd).Result()
		calls[i].Era = eraOf(sc[k].args)
	}
}

// The restore script applies journaled writes a new primary lacks; like a
// settlement, a copy run twice would not apply them twice (the lineage the
// first wrote holds them), but a lost reply would leave them unknown: sent
// once.
var restoreScript = newScript(lua.Restore, sentOnce)

// notRun reports whether err says a script call was not run, so that it
// can be sent again (failover.NotRun).
func notRun(err error) bool { return failover.NotRun(err) }

// maxNotRunRetries is how many times a script call that was not run is
// sent again: each READONLY closes one connection to the demoted primary,
// and the pool may hold a few.
const maxNotRunRetries = 3
