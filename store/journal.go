package store

import (
	"sync"
	"time"
	"unsafe"

	"github.com/tollgate/tollgate"
)

// A journal keeps what a Redis store admitted recently, so that a failover
// that loses those debits (a replica promoted before it received them) does
// not give the quota again: when the store sees that the primary it writes
// to changed, it debits them again on the new one (see watcher). Entries
// leave the journal once every replica of their primary has acknowledged
// them (replication offsets, read from INFO replication), or once they are
// older than its window, whichever comes first.
type journal struct {
	window time.Duration
	clock  func() time.Time

	mu      sync.Mutex
	entries []admission // by seq, oldest first, from head
	head    int
	seq     uint64 // the last seq given
}

// admission is one admission in the journal: what to debit again, and where
// it was debited.
type admission struct {
	seq  uint64
	req  tollgate.Request // normalized: Key, Limit, Cost, RequestID
	at   int64            // the store's clock at the admission, µs
	end  int64            // µs: a fixed window's end; 0 for the others
	kept time.Time        // when it entered the journal, by the local clock
	node string           // the primary's address on a Cluster; "" otherwise
	// replay marks an admission found missing on a new primary and not yet
	// debited there.
	replay bool
}

func newJournal(window time.Duration) *journal {
	return &journal{window: window, clock: time.Now}
}

// add records an admission of req (normalized, admitted and debited: not a
// replay) decided d on node, flagged for replay when replay is set, and
// returns its seq.
func (j *journal) add(req tollgate.Request, d tollgate.Decision, node string, replay bool) uint64 {
	e := admission{req: req, at: d.At.UnixMicro(), node: node, replay: replay}
	if req.Limit.Algorithm == tollgate.FixedWindow {
		e.end = e.at + d.ResetAfter.Microseconds()
	}
	e.req.ReplayTTL, e.req.Overdraw = 0, false
	j.mu.Lock()
	e.kept = j.clock()
	j.seq++
	e.seq = j.seq
	j.entries = append(j.entries, e)
	j.mu.Unlock()
	return e.seq
}

// lastSeq is the seq of the latest admission: every admission up to it was answered
// before the caller's next command was sent.
func (j *journal) lastSeq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq
}

// len is how many entries the journal holds.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries) - j.head
}

// forget drops, from the oldest on, the entries past the window, and those
// whose primary acknowledged them on all its replicas: acked gives, per
// node, the last seq acknowledged. It stops at the first admission it keeps,
// so the journal stays ordered by seq; an admission waiting for its replay is
// kept unless it is past the window.
func (j *journal) forget(acked map[string]uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	oldest := j.clock().Add(-j.window)
	for j.head < len(j.entries) {
		e := &j.entries[j.head]
		past := e.kept.Before(oldest)
		a, ok := acked[e.node]
		if !past && (e.replay || !ok || e.seq > a) {
			break
		}
		*e = admission{}
		j.head++
	}
	j.compactLocked()
}

// compactLocked gives back the slack before head once it is half the
// slice.
func (j *journal) compactLocked() {
	if j.head == len(j.entries) {
		j.entries, j.head = j.entries[:0], 0
		return
	}
	if j.head > 1024 && j.head > len(j.entries)/2 {
		n := copy(j.entries, j.entries[j.head:])
		clear(j.entries[n:])
		j.entries, j.head = j.entries[:n], 0
	}
}

// mark flags for replay the entries on node with safe < seq ≤ upTo: those
// the new primary of node may lack. It returns how many it flagged.
func (j *journal) mark(node string, safe, upTo uint64) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for i := j.head; i < len(j.entries); i++ {
		e := &j.entries[i]
		if e.node == node && e.seq > safe && e.seq <= upTo && !e.replay {
			e.replay = true
			n++
		}
	}
	return n
}

// move attributes node's entries to the primary moveTo names for each (a
// Cluster failover moved them with their slots).
func (j *journal) move(node string, moveTo func(tollgate.Request) string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := j.head; i < len(j.entries); i++ {
		if e := &j.entries[i]; e.node == node {
			e.node = moveTo(e.req)
		}
	}
}

// pending returns copies of the entries flagged for replay.
func (j *journal) pending() []admission {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []admission
	for i := j.head; i < len(j.entries); i++ {
		if j.entries[i].replay {
			out = append(out, j.entries[i])
		}
	}
	return out
}

// replayed records that the entries of seqs were debited again: they leave
// their place and enter the journal anew, with new seqs, as admissions of
// the new primary that its own replicas have yet to acknowledge.
func (j *journal) replayed(seqs map[uint64]bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var again []admission
	for i := j.head; i < len(j.entries); i++ {
		e := &j.entries[i]
		if seqs[e.seq] {
			again = append(again, *e)
			e.replay = false
			e.kept = time.Time{} // past the window: forget drops it
			e.node = "\x00replayed"
		}
	}
	for _, e := range again {
		j.seq++
		e.seq, e.replay = j.seq, false
		j.entries = append(j.entries, e)
	}
}

// nodes returns the nodes the journal's entries are on.
func (j *journal) nodes() map[string]bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]bool{}
	for i := j.head; i < len(j.entries); i++ {
		out[j.entries[i].node] = true
	}
	return out
}

// clear drops every admission.
func (j *journal) clear() {
	j.mu.Lock()
	j.entries, j.head = nil, 0
	j.mu.Unlock()
}

// bytes is the memory the journal's slice holds, at its capacity: Key and
// RequestID are the callers' strings, shared, not copied.
func (j *journal) bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return int64(cap(j.entries)) * int64(unsafe.Sizeof(admission{}))
}
