package store

import (
	"testing"
	"time"
	"unsafe"

	"github.com/tollgate/tollgate"
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
