package failover

import (
	"fmt"
	"testing"
	"time"
)

func write(era string, key int, seq, at int64) Entry {
	return Entry{Era: era, Seq: seq, At: at, Expires: at + 1e6, Write: Write{Key: fmt.Sprintf("k%d", key), Delta: 1}}
}

// TestJournalAddAllocations adds writes to a journal that has held as
// many before: adding one allocates nothing (its blocks are reused), and
// copies no other write.
func TestJournalAddAllocations(t *testing.T) {
	j := NewJournal(10*time.Second, DefaultMaxBytes)
	e := write("a", 1, 1, 1)
	for range 2 * queueBlock {
		j.Add(e)
	}
	j.Take("a")
	if n := testing.AllocsPerRun(2*queueBlock, func() { j.Add(e) }); n != 0 {
		t.Errorf("Add allocates %v times a write, want 0", n)
	}
}

// TestJournalForgetsWhatReplicasAcknowledged observes a primary's
// replication: the writes added before a read its replicas acknowledged
// leave; those after stay; a primary never seen with a replica keeps none;
// one that had a replica and has none now keeps everything.
func TestJournalForgetsWhatReplicasAcknowledged(t *testing.T) {
	j := NewJournal(10*time.Second, DefaultMaxBytes)
	for i := range 10 {
		j.Add(write("a", i, int64(i+1), 100))
	}
	pos := j.Pos("a")
	j.Observe("a", pos, ReplInfo{Master: true, Offset: 500, Acked: 400, Replicas: 1}, 100)
	if n := j.Len(); n != 10 {
		t.Fatalf("%d writes after a read not yet acknowledged, want 10", n)
	}
	for i := range 5 {
		j.Add(write("a", i, int64(i+20), 100))
	}
	pos2 := j.Pos("a")
	j.Observe("a", pos2, ReplInfo{Master: true, Offset: 700, Acked: 500, Replicas: 1}, 100)
	if n := j.Len(); n != 5 {
		t.Fatalf("%d writes after the first read was acknowledged, want the 5 added since", n)
	}
	// No replica now, after one: the primary may be being replaced.
	j.Observe("a", j.Pos("a"), ReplInfo{Master: true, Offset: 800, Acked: 800}, 100)
	if n := j.Len(); n != 5 {
		t.Fatalf("%d writes with the replica gone, want all 5 kept", n)
	}
	// A primary never seen with a replica acknowledges everything.
	j.Add(write("b", 1, 1, 100))
	j.Observe("b", j.Pos("b"), ReplInfo{Master: true, Offset: 10, Acked: 10}, 100)
	if n := j.Len(); n != 5 {
		t.Fatalf("%d writes, want era b's gone", n)
	}
	if c := j.Counts(); c.Held != 11 {
		t.Errorf("held %d, want 11", c.Held)
	}
}

// TestJournalWindowByThePrimarysClock drops writes older than the window
// by their primary's clock as last read; a primary that stops answering
// stops its clock, so its writes wait, up to MaxSilence by the local one.
func TestJournalWindowByThePrimarysClock(t *testing.T) {
	j := NewJournal(time.Second, DefaultMaxBytes)
	local := time.Unix(1000, 0)
	j.now = func() time.Time { return local }
	j.Add(write("a", 1, 1, 5_000_000))
	j.Add(write("a", 2, 2, 5_500_000))
	pos := j.Pos("a")
	j.Observe("a", pos, ReplInfo{Master: true, Offset: 10, Acked: 5, Replicas: 1}, 6_300_000)
	if n := j.Len(); n != 1 {
		t.Fatalf("%d writes at 6.3 s by the primary's clock, want the one at 5.5 s", n)
	}
	// The primary answers no more: an hour by the local clock changes
	// nothing, until MaxSilence.
	local = local.Add(time.Hour / 12)
	j.Expire()
	if n := j.Len(); n != 1 {
		t.Fatalf("%d writes, want the one still waiting for its primary's successor", n)
	}
	local = local.Add(MaxSilence)
	j.Expire()
	if n, c := j.Len(), j.Counts(); n != 0 || c.Expired != 2 {
		t.Fatalf("%d writes, %d expired; want 0 and 2", n, c.Expired)
	}
}

// TestJournalMemoryCap drops the oldest writes past the cap, of the era
// holding the most, and counts and reports them.
func TestJournalMemoryCap(t *testing.T) {
	e := write("a", 1, 1, 1)
	size := e.size()
	j := NewJournal(time.Minute, 10*size)
	var reported int
	j.SetOnDrop(func(n int) { reported += n })
	for i := range 15 {
		j.Add(write("a", 1, int64(i), 1))
	}
	j.Add(write("b", 1, 1, 1))
	if n, b := j.Len(), j.Bytes(); n != 10 || b > 10*size {
		t.Fatalf("%d writes in %d bytes, want 10 in at most %d", n, b, 10*size)
	}
	if c := j.Counts(); c.Dropped != 6 || reported != 6 {
		t.Fatalf("dropped %d, reported %d; want 6", c.Dropped, reported)
	}
	got := j.Take("a", "b")
	if len(got) != 10 || got[0].Seq != 6 {
		t.Fatalf("took %d writes, the first of seq %d; want era a's newest 9 (from seq 6) and b's", len(got), got[0].Seq)
	}
}

// TestJournalTakeRetires takes an era's writes: the era is retired, and a
// write of it added later waits in Retired.
func TestJournalTakeRetires(t *testing.T) {
	j := NewJournal(time.Minute, DefaultMaxBytes)
	j.Add(write("a", 1, 1, 1))
	if got := j.Take("a"); len(got) != 1 || !j.IsRetired("a") {
		t.Fatalf("took %d, retired %v", len(got), j.IsRetired("a"))
	}
	j.Add(write("a", 2, 2, 1))
	if r := j.Retired(); len(r) != 1 || r[0] != "a" {
		t.Fatalf("retired eras holding writes: %v, want [a]", r)
	}
}
