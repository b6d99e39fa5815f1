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
// to changed, it debits them again on the new one (see watcher). Admissions
// leave the journal once every replica of their primary has acknowledged
// them (replication offsets, read from INFO replication), or once they are
// older than its window, whichever comes first.
//
// Admissions are kept in blocks of journalBlock, oldest first: adding one
// never copies the others (a growing slice would, and did cost a decision
// more than the rest of the journal), and the blocks emptied from the front
// are reused.
type journal struct {
	window time.Duration
	clock  func() time.Time

	mu     sync.Mutex
	blocks [][]admission // each of capacity journalBlock; blocks[0][head:] is the oldest
	head   int
	n      int           // admissions held
	spare  [][]admission // emptied blocks, for reuse (at most journalSpare)
	seq    uint64        // the last seq given
}

const (
	journalBlock = 1024
	journalSpare = 8
)

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
	seq := j.appendLocked(e)
	j.mu.Unlock()
	return seq
}

// appendLocked gives e the next seq and adds it at the end.
func (j *journal) appendLocked(e admission) uint64 {
	j.seq++
	e.seq = j.seq
	last := len(j.blocks) - 1
	if last < 0 || len(j.blocks[last]) == journalBlock {
		var b []admission
		if k := len(j.spare) - 1; k >= 0 {
			b, j.spare = j.spare[k], j.spare[:k]
		} else {
			b = make([]admission, 0, journalBlock)
		}
		j.blocks = append(j.blocks, b)
		last++
	}
	j.blocks[last] = append(j.blocks[last], e)
	j.n++
	return e.seq
}

// eachLocked calls f on every admission, oldest first, until f returns
// false.
func (j *journal) eachLocked(f func(*admission) bool) {
	for bi, b := range j.blocks {
		start := 0
		if bi == 0 {
			start = j.head
		}
		for i := start; i < len(b); i++ {
			if !f(&b[i]) {
				return
			}
		}
	}
}

// dropOldestLocked removes the oldest admission.
func (j *journal) dropOldestLocked() {
	b := j.blocks[0]
	b[j.head] = admission{}
	j.head++
	j.n--
	if j.head == len(b) && (len(b) == journalBlock || len(j.blocks) == 1) {
		if len(j.spare) < journalSpare {
			j.spare = append(j.spare, b[:0])
		}
		j.blocks[0] = nil
		j.blocks = j.blocks[1:]
		j.head = 0
		if len(j.blocks) == 0 {
			j.blocks = nil
		}
	}
}

// lastSeq is the seq of the latest admission: every admission up to it was
// answered before the caller's next command was sent.
func (j *journal) lastSeq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq
}

// len is how many admissions the journal holds.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// bytes is the memory the journal's blocks hold: the identities and
// request ids are the callers' strings, shared, not copied.
func (j *journal) bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return int64(len(j.blocks)+len(j.spare)) * journalBlock * int64(unsafe.Sizeof(admission{}))
}

// forget drops, from the oldest on, the admissions past the window, and
// those whose primary acknowledged them on all its replicas: acked gives,
// per node, the last seq acknowledged. It stops at the first admission it
// keeps, so the journal stays ordered by seq; an admission waiting for its
// replay is kept unless it is past the window.
func (j *journal) forget(acked map[string]uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	oldest := j.clock().Add(-j.window)
	for j.n > 0 {
		e := &j.blocks[0][j.head]
		past := e.kept.Before(oldest)
		a, ok := acked[e.node]
		if !past && (e.replay || !ok || e.seq > a) {
			break
		}
		j.dropOldestLocked()
	}
}

// clear drops every admission.
func (j *journal) clear() {
	j.mu.Lock()
	j.blocks, j.spare, j.head, j.n = nil, nil, 0, 0
	j.mu.Unlock()
}

// mark flags for replay the admissions on node with safe < seq ≤ upTo:
// those the new primary of node may lack. It returns how many it flagged.
func (j *journal) mark(node string, safe, upTo uint64) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	j.eachLocked(func(e *admission) bool {
		if e.node == node && e.seq > safe && e.seq <= upTo && !e.replay {
			e.replay = true
			n++
		}
		return true
	})
	return n
}

// move attributes node's admissions to the primary moveTo names for each
// (a Cluster failover moved them with their slots).
func (j *journal) move(node string, moveTo func(tollgate.Request) string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.eachLocked(func(e *admission) bool {
		if e.node == node {
			e.node = moveTo(e.req)
		}
		return true
	})
}

// pending returns copies of the admissions flagged for replay.
func (j *journal) pending() []admission {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []admission
	j.eachLocked(func(e *admission) bool {
		if e.replay {
			out = append(out, *e)
		}
		return true
	})
	return out
}

// replayed records that the admissions of seqs were debited again: they
// leave their place and enter the journal anew, with new seqs, as
// admissions of the new primary that its own replicas have yet to
// acknowledge.
func (j *journal) replayed(seqs map[uint64]bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var again []admission
	j.eachLocked(func(e *admission) bool {
		if seqs[e.seq] {
			again = append(again, *e)
			e.replay = false
			e.kept = time.Time{} // past the window: forget drops it
			e.node = replayedNode
		}
		return true
	})
	for _, e := range again {
		e.replay = false
		j.appendLocked(e)
	}
}

// replayedNode is the node of an admission's old place once it was
// replayed: no primary's, so that nothing marks or moves it again.
const replayedNode = "\x00replayed"
