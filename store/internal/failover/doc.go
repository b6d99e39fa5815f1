// Package failover keeps a Redis store's count exact through a change of
// primary: nothing a lost primary admitted is forgotten, nothing a new
// primary holds is counted twice, and nothing is decided on a new primary
// before it holds what the store journaled for it.
//
// Three parts, each in a file of its own:
//
//   - A Gate stands before each primary (each node of a Cluster client, the
//     one client of a single node or a Sentinel set). It stamps every call
//     of a script that writes a state with the era of the primary the call
//     goes to (the first 12 hex digits of its replication id), which the
//     scripts write into each state's lineage. A call waits while the gate
//     verifies its primary: a first call, a new connection to another
//     server behind the address, a READONLY. Verifying reads INFO
//     replication; when the primary took over from another (its second
//     replication id) or replaced one at the same address, the gate first
//     restores on it the journal's writes of the era it replaced, and only
//     then lets calls through.
//   - A Journal keeps, per era, the writes the store made: each one's key,
//     units, sequence and when its effect ends. A write leaves the journal
//     once every replica of its primary acknowledged it, once it is older
//     than the window, or once it was restored; the journal's memory is
//     capped, and each write dropped for the cap is counted.
//   - A Watcher reads, while the journal holds writes, INFO replication and
//     TIME from every primary every ProbeEvery: the replicas' acknowledged
//     offsets, the primary's clock, and a change of primary, which it has
//     the gate verify at once; and it restores the writes of eras that
//     ended after their successor was verified.
//
// Whether a new primary holds a write is decided by the restore script
// against the key's lineage, which replicates with the state in one string:
// exact whatever the replication offset (lua/doc.go, Lineage and Restore).
package failover
