package store

import (
	"context"
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
// replica acknowledged it: window should exceed the replicas' lag. A
// negative window is an error.
func WithJournal(window time.Duration) RedisOption {
	if window < 0 {
		return badOption{invalidOption("WithJournal", window, "0 (off) or more")}
	}
	return redisOption(func(r *Redis) { r.journalWindow = window })
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

// maxReadOnlyRetries is how many times a decision answered READONLY is
// sent again: each READONLY closes one connection to the demoted primary,
// and the pool may hold a few.
const maxReadOnlyRetries = 3

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
