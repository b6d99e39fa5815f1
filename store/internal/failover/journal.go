package failover

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Entry is one write a store made, as the journal keeps it until the
// write is known to be safe (on every replica of its primary), too old to
// matter, or restored on the primary that replaced its own.
type Entry struct {
	// Era is the era the write was stamped with: its primary's.
	Era string
	// Seq is the sequence of the call that made the write, as it left its
	// slot's lineage (0 for a seat, which has none).
	Seq int64
	// At is the write's time, and Expires when its effect ends (a seat:
	// when it expires), in µs on its primary's clock.
	At, Expires int64
	Write       Write
}

// Write says what to restore of an Entry: a change of one identity's
// state (a debit, a give-back) with the request-id marker or settlement
// record written beside it, or a seat held or released; in the terms of
// the restore and seat scripts (lua/doc.go).
type Write struct {
	// Key is the state key (a seat's: the identity's seats key), and Aux
	// the marker or record key beside it (a seat's: its hold-time key).
	Key, Aux string
	// Lineage is the lineage key of Key's slot, which the call that made
	// the write wrote its sequence to (lua/doc.go, Lineage); "" for a
	// seat, which has none.
	Lineage string
	// Alg, Rate, Period and Capacity are the limit, as the scripts take
	// it (internal/algo.ParamsOf).
	Alg, Rate, Period, Capacity int64
	// Delta is the units the write debited (below 0: gave back), as the
	// settle script applies a delta; DebitedAt and AdmReset are a
	// give-back's admission (µs), as the settle script takes them.
	Delta, DebitedAt, AdmReset int64
	// AuxKind says what Aux is (AuxNone, AuxMarker or AuxRecord, a
	// settlement record holding AuxValue), and AuxUntil when it ends (µs).
	AuxKind, AuxValue, AuxUntil int64
	// Seat is set for a seat: its id, and whether the write released it
	// (else it held it until the entry's Expires).
	Seat    string
	Release bool
}

// What a Write's Aux is (the restore script's aux, lua/doc.go).
const (
	AuxNone   = 0 // nothing beside the state
	AuxMarker = 1 // a request-id marker
	AuxRecord = 2 // a settlement record
)

// entrySize is what an entry costs the journal, its strings apart.
const entrySize = int64(unsafe.Sizeof(Entry{}))

// size is what e costs the journal: the entry and the bytes of its
// strings, which it keeps alive (the lineage key is shared by the writes
// of its slot).
func (e *Entry) size() int64 {
	w := &e.Write
	return entrySize + int64(len(w.Key)+len(w.Aux)+len(w.Seat))
}

// DefaultMaxBytes is the journal's memory cap when WithJournal's store
// sets none: at about 200 bytes a write, a quarter of a million writes;
// with the rest of a busy process, a heap under 64 MB while a replica is
// stopped (docs/performance.md).
const DefaultMaxBytes = 48 << 20

// A Journal keeps recent writes by era (see the package doc). It is safe
// for concurrent use; adding a write is O(1) and takes one lock.
type Journal struct {
	window   int64 // µs
	maxBytes int64
	now      func() time.Time // the local clock, to carry a primary's forward

	mu    sync.Mutex
	logs  map[string]*eraLog
	bytes int64
	n     int

	dropped, restored, held, expired atomic.Int64
	// onDrop, when set, is called (outside the lock) with the number of
	// writes a call to Add dropped for the cap.
	onDrop func(int)
}

// eraLog is one era's writes, oldest first.
type eraLog struct {
	era string
	q   queue
	// probes are recent reads of the primary's replication: every write
	// added before the read (pos, a count of writes ever added) was in its
	// replication stream up to offset. Oldest first, at most maxProbes.
	probes []probe
	added  uint64
	// replicated: the primary was seen with a replica; when it then has
	// none, one may be taking over, and nothing is forgotten by offset.
	replicated bool
	// retired: the era's primary was replaced; its writes wait to be
	// restored on the primary that replaced it.
	retired bool
	// clock is the era's primary's clock, as last read (µs), and the
	// local time it was read at.
	clock   int64
	clockAt time.Time
}

type probe struct {
	pos    uint64
	offset int64
}

// maxProbes bounds the reads an era keeps: when its replicas fall behind,
// older reads are dropped, so writes wait a little longer to be forgotten
// (until a later read is acknowledged), and never more than the window.
const maxProbes = 64

// NewJournal returns a journal keeping each write at most window, in at
// most maxBytes of memory.
func NewJournal(window time.Duration, maxBytes int64) *Journal {
	return &Journal{window: window.Microseconds(), maxBytes: maxBytes, now: time.Now, logs: map[string]*eraLog{}}
}

// SetOnDrop has f called with the number of writes each Add dropped for
// the memory cap.
func (j *Journal) SetOnDrop(f func(int)) { j.onDrop = f }

func (j *Journal) logLocked(era string) *eraLog {
	l := j.logs[era]
	if l == nil {
		l = &eraLog{era: era}
		j.logs[era] = l
	}
	return l
}

// Add keeps entries, under one lock. When the journal's memory passes its
// cap, the oldest writes go first, and each is counted (Dropped): a write
// dropped before its replicas acknowledged it is forgotten if its primary
// is lost.
func (j *Journal) Add(entries ...Entry) {
	now := j.now()
	j.mu.Lock()
	var l *eraLog
	for _, e := range entries {
		if e.Era == "" {
			continue // not stamped: nothing to restore it by
		}
		if l == nil || e.Era != l.era {
			l = j.logLocked(e.Era)
		}
		l.q.push(e)
		l.added++
		if e.At > l.clock {
			l.clock, l.clockAt = e.At, now
		}
		j.bytes += e.size()
		j.n++
	}
	dropped := 0
	for j.bytes > j.maxBytes && j.n > 0 {
		j.dropOldestLocked()
		dropped++
	}
	j.mu.Unlock()
	if dropped > 0 {
		j.dropped.Add(int64(dropped))
		if j.onDrop != nil {
			j.onDrop(dropped)
		}
	}
}

// dropOldestLocked drops the oldest write of the era holding the most.
func (j *Journal) dropOldestLocked() {
	var most *eraLog
	for _, l := range j.logs {
		if most == nil || l.q.len() > most.q.len() {
			most = l
		}
	}
	j.popLocked(most)
}

func (j *Journal) popLocked(l *eraLog) {
	e := l.q.pop()
	j.bytes -= e.size()
	j.n--
}

// Len is how many writes the journal holds, and Bytes their memory.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// Bytes is the memory the journal's writes hold (see Len).
func (j *Journal) Bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.bytes
}

// Pos returns how many writes of era were ever added: a read of its
// primary's replication sent after Pos covers every one of them.
func (j *Journal) Pos(era string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if l := j.logs[era]; l != nil {
		return l.added
	}
	return 0
}

// Observe records a read of era's primary: inf, its replication read after
// pos writes were added, and now, its clock (µs). The writes its replicas
// acknowledged leave the journal (all of them when it never had a replica:
// no failover can lose what only it holds), as do those older than the
// window by its clock.
func (j *Journal) Observe(era string, pos uint64, inf ReplInfo, now int64) {
	at := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[era]
	if l == nil || l.retired {
		return
	}
	l.clock, l.clockAt = now, at
	l.replicated = l.replicated || inf.Replicas > 0
	l.probes = append(l.probes, probe{pos: pos, offset: inf.Offset})
	if len(l.probes) > maxProbes {
		l.probes = slices.Delete(l.probes, 0, len(l.probes)-maxProbes)
	}
	upTo := uint64(0)
	switch {
	case !l.replicated:
		upTo = pos
	case inf.Replicas > 0:
		k := -1
		for i, p := range l.probes {
			if p.offset <= inf.Acked {
				k = i
			}
		}
		if k >= 0 {
			upTo = l.probes[k].pos
			l.probes = l.probes[k:]
		}
	}
	first := l.added - uint64(l.q.len())
	for ; first < upTo && l.q.len() > 0; first++ {
		j.popLocked(l)
		j.held.Add(1)
	}
	j.expireLocked(l, at)
}

// MaxSilence is the longest the journal keeps the writes of an era whose
// primary has not been read since: a primary that died is replaced within
// Sentinel's or the Cluster's failover time (Sentinel's default
// down-after-milliseconds is 30 s), and its writes wait for their
// successor however long that takes, up to this.
const MaxSilence = 10 * time.Minute

// expireLocked drops l's writes older than the window by its primary's
// clock as last read: a clock that stops while the primary does not
// answer, so that a dead primary's writes wait for its successor (at most
// MaxSilence).
func (j *Journal) expireLocked(l *eraLog, at time.Time) {
	if at.Sub(l.clockAt) > MaxSilence {
		for l.q.len() > 0 {
			j.popLocked(l)
			j.expired.Add(1)
		}
		return
	}
	for l.q.len() > 0 && l.q.front().At < l.clock-j.window {
		j.popLocked(l)
		j.expired.Add(1)
	}
}

// Expire drops, from every era, the writes older than the window by the
// era's clock (carried forward from its last reading by the local one).
func (j *Journal) Expire() {
	at := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	for era, l := range j.logs {
		j.expireLocked(l, at)
		if l.q.len() == 0 && l.retired {
			delete(j.logs, era)
		}
	}
}

// Take removes and returns the writes of the eras given, oldest first, and
// marks those eras retired: a write of theirs added later waits in
// Retired's list.
func (j *Journal) Take(eras ...string) []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Entry
	for _, era := range eras {
		if era == "" {
			continue
		}
		l := j.logLocked(era)
		l.retired = true
		for l.q.len() > 0 {
			e := l.q.front()
			out = append(out, e)
			j.popLocked(l)
		}
		l.probes = nil
	}
	return out
}

// Retired returns the eras retired that hold writes.
func (j *Journal) Retired() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for era, l := range j.logs {
		if l.retired && l.q.len() > 0 {
			out = append(out, era)
		}
	}
	return out
}

// IsRetired reports whether era's primary was replaced.
func (j *Journal) IsRetired(era string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[era]
	return l != nil && l.retired
}

// Restored counts writes restored on a new primary (Stats).
func (j *Journal) Restored(n int) { j.restored.Add(int64(n)) }

// Counts are what a journal did so far.
type Counts struct {
	// Held counts writes a new primary was shown to hold (by lineage) or
	// that their replicas acknowledged; Restored those restored on a new
	// primary; Expired those that left past the window; Dropped those
	// dropped for the memory cap.
	Held, Restored, Expired, Dropped int64
}

// Counts returns what the journal did so far.
func (j *Journal) Counts() Counts {
	return Counts{Held: j.held.Load(), Restored: j.restored.Load(), Expired: j.expired.Load(), Dropped: j.dropped.Load()}
}

// Held counts n writes a new primary was shown to hold.
func (j *Journal) Held(n int) { j.held.Add(int64(n)) }

// Clear drops every write.
func (j *Journal) Clear() {
	j.mu.Lock()
	j.logs, j.bytes, j.n = map[string]*eraLog{}, 0, 0
	j.mu.Unlock()
}

// queue is a FIFO of entries in blocks of queueBlock: adding one never
// copies the others, and emptied blocks are reused.
type queue struct {
	blocks [][]Entry
	head   int
	n      int
	spare  []Entry
}

const queueBlock = 512

func (q *queue) len() int { return q.n }

func (q *queue) push(e Entry) {
	last := len(q.blocks) - 1
	if last < 0 || len(q.blocks[last]) == queueBlock {
		b := q.spare
		q.spare = nil
		if b == nil {
			b = make([]Entry, 0, queueBlock)
		}
		q.blocks = append(q.blocks, b)
		last++
	}
	q.blocks[last] = append(q.blocks[last], e)
	q.n++
}

func (q *queue) front() Entry { return q.blocks[0][q.head] }

func (q *queue) pop() Entry {
	b := q.blocks[0]
	e := b[q.head]
	b[q.head] = Entry{}
	q.head++
	q.n--
	if q.head == len(b) && (len(b) == queueBlock || len(q.blocks) == 1) {
		q.spare = b[:0]
		q.blocks[0] = nil
		q.blocks = q.blocks[1:]
		q.head = 0
	}
	return e
}
