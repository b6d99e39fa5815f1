package failover

import (
	"strconv"
	"strings"
)

// ReplInfo is what INFO replication says of a server.
type ReplInfo struct {
	Master          bool
	ReplID, ReplID2 string
	Offset          int64 // master_repl_offset
	// Acked is the least offset its replicas acknowledged; Offset when it
	// has none.
	Acked    int64
	Replicas int // connected_slaves
}

// ParseReplication reads the fields the gate and the journal need from the
// text of INFO replication.
func ParseReplication(s string) ReplInfo {
	var inf ReplInfo
	slaves := int64(-1)
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "role":
			inf.Master = v == "master"
		case k == "master_replid":
			inf.ReplID = v
		case k == "master_replid2":
			inf.ReplID2 = v
		case k == "master_repl_offset":
			inf.Offset, _ = strconv.ParseInt(v, 10, 64)
		case k == "connected_slaves":
			inf.Replicas, _ = strconv.Atoi(v)
		case strings.HasPrefix(k, "slave") && strings.Contains(v, "offset="):
			_, o, _ := strings.Cut(v, "offset=")
			o, _, _ = strings.Cut(o, ",")
			n, err := strconv.ParseInt(o, 10, 64)
			if err != nil {
				n = 0
			}
			if slaves < 0 || n < slaves {
				slaves = n
			}
		}
	}
	inf.Acked = inf.Offset
	if slaves >= 0 {
		inf.Acked = slaves
	}
	return inf
}

// EraLen is how many hex digits of a replication id name an era.
const EraLen = 12

// EraOf returns the era of the primary whose replication id is replid: its
// first EraLen digits, or "" for an id that names no history (a server
// that never had a second id answers forty zeros as its replid2).
func EraOf(replid string) string {
	if len(replid) < EraLen || strings.Trim(replid, "0") == "" {
		return ""
	}
	return replid[:EraLen]
}
