package failover

import (
	"strings"
	"testing"
)

// ParseReplication reads Redis 7's and Valkey 8's INFO replication alike:
// a replica still attaching (wait_bgsave, Valkey's rdb-channel of a
// dual-channel sync) counts as a replica, so a gate is exact from the
// moment the primary lists it, and it has acknowledged nothing.
func TestParseReplication(t *testing.T) {
	const id, id2 = "e0261eafe98d5bd4296f9b7c34a6cba0192f8c4e", "894b668e9b4ae031d8fb66bc1dc2a1611eee38df"
	primary := func(replicas int, lines ...string) string {
		return strings.Join(append(append([]string{"# Replication", "role:master",
			"connected_slaves:" + string(rune('0'+replicas))}, lines...),
			"master_failover_state:no-failover", "master_replid:"+id, "master_replid2:"+id2,
			"master_repl_offset:5000", "second_repl_offset:1201", "repl_backlog_active:1"), "\r\n") + "\r\n"
	}
	for _, c := range []struct {
		name     string
		text     string
		master   bool
		replicas int
		acked    int64
	}{
		{"no replica", primary(0), true, 0, 5000},
		{"redis 7 online", primary(1, "slave0:ip=127.0.0.1,port=6380,state=online,offset=4800,lag=0"), true, 1, 4800},
		{"redis 7 attaching", primary(2, "slave0:ip=127.0.0.1,port=6380,state=online,offset=4900,lag=0",
			"slave1:ip=127.0.0.1,port=6381,state=wait_bgsave,offset=0,lag=0"), true, 2, 0},
		{"valkey 8 attaching", primary(1, "slave0:ip=127.0.0.1,port=16392,state=wait_bgsave,offset=0,lag=0,type=replica",
			"replicas_waiting_psync:0"), true, 1, 0},
		{"valkey 8 dual channel", primary(1, "slave0:ip=127.0.0.1,port=16392,state=wait_bgsave,offset=0,lag=0,type=rdb-channel",
			"replicas_waiting_psync:1"), true, 1, 0},
		{"valkey 8 online", primary(1, "slave0:ip=127.0.0.1,port=16392,state=online,offset=4990,lag=1,type=replica",
			"replicas_waiting_psync:0"), true, 1, 4990},
		{"replica", "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_link_status:up\r\nconnected_slaves:0\r\nmaster_replid:" + id + "\r\n", false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			inf := ParseReplication(c.text)
			if inf.Master != c.master || inf.Replicas != c.replicas || inf.Acked != c.acked || inf.ReplID != id {
				t.Errorf("ParseReplication = %+v, want master %v, %d replicas, acked %d, replid %s", inf, c.master, c.replicas, c.acked, id)
			}
			if c.master && (inf.Offset != 5000 || EraOf(inf.ReplID2) != id2[:EraLen]) {
				t.Errorf("ParseReplication = %+v, want offset 5000, replid2 %s", inf, id2)
			}
		})
	}
}
