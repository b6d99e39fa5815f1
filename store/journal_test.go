package store

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestJournalAddAllocations bounds what recording an admission costs a
// decision: no allocation beyond the journal's slice growing.
func TestJournalAddAllocations(t *testing.T) {
	j := newJournal(time.Minute)
	req := tollgate.Request{Key: "k", Limit: tollgate.PerSecond(10), Cost: 1}
	d := tollgate.Decision{Allowed: true, At: time.Now()}
	allocs := testing.AllocsPerRun(10_000, func() { j.add(req, d, "", false) })
	if allocs > 0.01 {
		t.Errorf("recording an admission allocates %v times, want none but the slice's growth", allocs)
	}
	t.Logf("an admission in the journal: %d bytes", unsafe.Sizeof(admission{}))
}

// TestJournalForget checks what leaves the journal: the admissions the
// replicas acknowledged, in order, and those past the window, but not an
// admission waiting for its replay within the window.
func TestJournalForget(t *testing.T) {
	now := time.Unix(1000, 0)
	j := newJournal(time.Second)
	j.clock = func() time.Time { return now }
	req := tollgate.Request{Key: "k", Limit: tollgate.PerSecond(10), Cost: 1}
	d := tollgate.Decision{Allowed: true, At: now}
	for range 5 {
		j.add(req, d, "a", false)
	}
	j.add(req, d, "b", false) // seq 6
	j.add(req, d, "a", false) // seq 7
	j.forget(map[string]uint64{"a": 3})
	if n := j.len(); n != 4 {
		t.Fatalf("after acknowledging 3 of a's admissions: %d left, want 4", n)
	}
	j.forget(map[string]uint64{"a": 7})
	if n := j.len(); n != 2 {
		t.Fatalf("b's unacknowledged admission holds what follows it: %d left, want 2", n)
	}
	if n := j.mark("b", 0, 100); n != 1 {
		t.Fatalf("mark flagged %d, want 1", n)
	}
	j.forget(map[string]uint64{"a": 7, "b": 6})
	if n := j.len(); n != 2 {
		t.Fatalf("an admission waiting for its replay was forgotten: %d left, want 2", n)
	}
	now = now.Add(2 * time.Second)
	j.forget(nil)
	if n := j.len(); n != 0 {
		t.Fatalf("past the window: %d left, want 0", n)
	}
}

// TestParseReplication reads what the journal needs from INFO replication.
func TestParseReplication(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=1,state=online,offset=900,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=2,state=online,offset=850,lag=1\r\n" +
		"master_replid:aaa\r\nmaster_replid2:bbb\r\nmaster_repl_offset:1000\r\nsecond_repl_offset:700\r\n"
	got := parseReplication(info)
	want := replInfo{master: true, replid: "aaa", replid2: "bbb", offset: 1000, second: 700, acked: 850, replicas: 2}
	if got != want {
		t.Errorf("parseReplication = %+v, want %+v", got, want)
	}
	if got := parseReplication("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:42\r\n"); got.acked != 42 {
		t.Errorf("without replicas acked = %d, want the offset 42", got.acked)
	}
}

// TestJournalGoroutineEnds checks that the journal's goroutine owns up to
// its owner: on a primary without replicas every admission is acknowledged
// at the first read, the journal empties and the goroutine ends by itself;
// with a replica that stops acknowledging, admissions stay, and Close stops
// the goroutine and empties the journal.
func TestJournalGoroutineEnds(t *testing.T) {
	ctx := context.Background()
	req := tollgate.Request{Key: "idle", Limit: tollgate.PerSecond(1000)}

	st := newRedis(t, redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	for range 10 {
		if _, err := st.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return !st.failover.running.Load() })
	if n := st.Stats().Journal; n != 0 {
		t.Errorf("the goroutine ended with %d admissions in the journal", n)
	}

	primary := redistest.Start(t)
	replica := redistest.Replica(t, primary)
	awaitAcknowledged(t, primary, "synced")
	st = newRedis(t, primary.Client(t), WithPrefix(redistest.KeyPrefix(t)))
	replica.Freeze(t)
	defer replica.Thaw(t)
	for range 10 {
		if _, err := st.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * journalProbeEvery)
	if n := st.Stats().Journal; n != 10 {
		t.Fatalf("with the replica frozen the journal holds %d admissions, want 10", n)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := st.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if st.failover.running.Load() || st.Stats().Journal != 0 {
		t.Errorf("after Close: running %v, %d admissions", st.failover.running.Load(), st.Stats().Journal)
	}
	if _, err := st.Allow(ctx, req); err != nil || st.Stats().Journal != 0 {
		t.Errorf("a decision after Close: %v, journal %d; want decided, not journaled", err, st.Stats().Journal)
	}
}
