// Package lua holds tollgate's Redis scripts (decide, batch, settle, seat,
// reset, admit, finish, share and restore). Each is assembled from a driver and the
// blocks it names among the *.lua files beside this one (assemble.go says
// how), and generated as Redis runs it into gen/<driver> by
// go generate ./lua: those files are embedded and sent, so a line number in
// a Redis error is a line of one of them. It exports their sources and
// SHA-1 hashes only (Script.Source, Script.Hash), for SCRIPT LOAD or inspection: the store
// sends them itself, as commands go-redis never re-sends (see store.Redis),
// because a decision re-sent after a lost reply would be debited twice.
//
// What follows is the scripts' wire protocol: what each takes in KEYS and
// ARGV, what it answers and what it writes. Times are in microseconds (µs)
// on the server's clock (TIME), TTLs in milliseconds. All the keys of a
// call must be on one Cluster slot; the store gives them one hash tag
// (docs/internals.md#redis-keys lists every key). The decide, settle and
// seat scripts trust their arguments: the store validates every request
// first.
//
// # Lineage
//
// The scripts that write states (decide, batch, settle, admit, finish and
// restore) take as ARGV[1] the era the call is stamped with: the store's
// name for the primary it verified the call is going to (the first 12 hex
// digits of its replication id) when that primary has a replica a failover
// could promote, or the empty string for none. Their last KEYS (of the
// decide and settle calls, inside an admit or finish call's) is the
// lineage key of the call's slot; a call without an era neither reads nor
// writes it. A call with an era that writes a state also writes the
// lineage key, once (lineage_write.lua): "seq era", or "seq era base prev"
// (lineage_read.lua), where seq, the call's sequence, is at least one more
// than the key's last and at least the server's clock in µs, era is the
// stamp, and once a later era writes a slot another era wrote, base and
// prev record the sequence and era it took the slot over at. Redis sends a
// script's writes to its replicas as one MULTI/EXEC, which a replica
// applies whole or not at all and keeps its offset before until it has
// applied it, so a replica holds a call's states and its lineage together,
// or neither: whether a primary holds a given write is a comparison of the
// sequence and era of the call that made it with its slot's lineage
// (restore.lua). The states carry nothing but their algorithm's numbers.
// Each write answers the sequence its call wrote at (0 without an era, or
// when it wrote nothing). The lineage key lives 30 minutes from the call
// that last set its TTL; the first call of each 10 minutes sets it again
// and the others keep it (SET … KEEPTTL), so it outlives every call by 20
// minutes.
//
// # Decide
//
// One call judges n ≥ 1 entries, each a (state key, limit, cost), in order,
// and debits them all only when every entry admits. Two entries on one
// state key see each other's debits.
//
//	KEYS[i]          entry i's state key
//	KEYS[n+i]        entry i's request-id marker (only when max_replays > 0)
//	KEYS[#KEYS]      the slot's lineage key (see Lineage)
//
//	ARGV[1]          the era (see Lineage)
//	ARGV[2]          max_replays: -1 peek (judge, write nothing), 0 decide
//	                 without a request id, m > 0 decide with one, replayed
//	                 at most m times
//	ARGV[3]          replay TTL: how long a marker lives after an admission
//	                 (only when max_replays > 0)
//	ARGV[h+1..]      five per entry, from h = 3 when max_replays > 0, else 2:
//	                 algorithm, rate, period, capacity, cost
//
// An entry's five numbers are internal/algo.ParamsOf's: the algorithm is
// tollgate.Algorithm's value (0 token bucket, 1 GCRA, 2 sliding window,
// 3 fixed window), the rate is events per period, the period is in µs (for
// a calendar fixed window -1 day, -2 week, -3 month, -4 year), the
// capacity is the burst (buckets) or the rate (windows), and
// 1 ≤ cost ≤ capacity.
//
// The reply is six integers per entry, then the server time:
//
//	{allowed (0|1), remaining, retry_after_us, reset_after_us, replayed (0|1), seq} × n, now_us
//
// where seq is the sequence the call wrote at (0 when the call wrote
// nothing, or had no era).
//
// What a call writes depends on how it was judged:
//
//   - Admitted (every entry admits): each state key is written with
//     SET … PX, for as long as its state matters plus at most 2 ms, and
//     each marker with SET <marker> 0 PX <replay TTL>.
//   - Denied (an entry denies): every entry answers allowed 0, those that
//     would have been admitted with retry_after 0, and nothing is written:
//     a denied call leaves no marker.
//   - Replayed (max_replays > 0 and every marker holds a count below
//     max_replays): nothing is debited; each entry answers
//     {1, remaining, 0, reset_after_us, 1, 0} from its current state, and
//     each distinct marker counts the replay (INCR, which keeps its TTL).
//   - Peek: judged like a decision without a request id; nothing is
//     written.
//
// A state key holds a short string of decimal integers, laid out as its
// algorithm's block (<algorithm>.lua) says; a key holding anything else
// reads as absent and is overwritten by the next admission.
//
// # Batch
//
// One call judges d ≥ 1 independent decisions, in order, each exactly as
// its own decide call of one entry would be (same max_replays, replies
// and writes), at one server time: a decision on a key sees the writes of
// the decisions before it. What a decision's decide call sends besides its
// keys (max_replays, replay TTL, algorithm, rate, period, capacity, cost)
// is its profile. The decisions of a call usually share a few profiles, so
// each distinct profile is sent once, first, and each decision names its
// profile by its place in that list:
//
//	KEYS             per decision: its state key, then its marker when its
//	                 max_replays > 0; then the slot's lineage key
//
//	ARGV[1]          the era (see Lineage)
//	ARGV[2]          P ≥ 1, the number of profiles
//	ARGV[3..7P+2]    seven per profile: max_replays, replay TTL (send 0 when
//	                 max_replays ≤ 0), algorithm, rate, period, capacity, cost
//	ARGV[7P+2+j]     decision j's profile, "1" to "P" in decimal
//
// When the decisions share few profiles (the store's rule: fewer than two
// decisions per profile), the call sends each decision's profile in turn
// instead, as its decide call's ARGV (the replay TTL only when
// max_replays > 0):
//
//	ARGV[1]          the era
//	ARGV[2]          0
//	ARGV[3..]        per decision: max_replays, [replay TTL,] algorithm,
//	                 rate, period, capacity, cost
//
// The reply is each decision's answer in turn, then the sequence the call
// wrote at (0: none, or no era), then the server time; an answer is
// compact (internal/batchreply decodes it):
//
//	-1                                    out of range: its profile's limit,
//	                                      TTL or cost
//	-2                                    Redis refused its write (INCR of a
//	                                      marker that holds no integer)
//	code, reset_after_us                  admitted
//	code, reset_after_us, retry_after_us  denied
//
// where code = remaining*8 + wrote*4 + allowed*2 + replayed, and wrote says
// the decision wrote its state (at the call's sequence). A decision answering -1
// (every decision of that profile does) or -2 writes nothing; the others
// are judged as usual. A call whose ARGV does not make whole profiles and
// decisions, whose profile has no max_replays (an integer ≥ -1), whose
// decision names no profile of the call, or whose KEYS are not those of
// its decisions, answers an error reply ("ERR tollgate batch: …") and
// writes nothing. On a replica (a demoted primary) the first refused write
// ends the call with its READONLY error reply: nothing was written. The script loops over its decisions, so the store sends
// at most 128 per call.
//
// # Settle
//
// A call admitted with a reserved cost is settled at its final cost, each
// entry on its own, in order (entries on one key see each other's writes);
// or, in overdraw mode, requests are debited whether or not they fit:
//
//	KEYS[i]          entry i's state key, as in the decide call
//	KEYS[n+i]        entry i's record (modes 1 and 3): the final cost it was
//	                 last settled at, {tag}:<alg>:s:<hash of the request id>
//	KEYS[2n+i]       entry i's request-id marker (mode 3 only), to delete
//	KEYS[#KEYS]      the slot's lineage key (see Lineage)
//
//	ARGV[1]          the era (see Lineage)
//	ARGV[2]          mode: 0 settle, 1 settle with records, 2 overdraw,
//	                 3 settle with records, then delete the markers, 4 look:
//	                 answer as mode 0 and write nothing (Peek's debt)
//	ARGV[3]          the records' TTL in milliseconds (send 0 unless mode 1
//	                 or 3)
//	ARGV[4+8(i-1)..] entry i: algorithm, rate, period, capacity, cost (the
//	                 reservation; in overdraw, the cost to debit, up to
//	                 10^12), final cost (0 to 10^12; in overdraw, the cost
//	                 again), the admission's now_us (0: unknown, as if now
//	                 from an empty bucket) and its reset_after_us
//
// The reply is seven integers per entry, then the server time (µs):
//
//	{allowed (0|1), remaining, retry_after_us, reset_after_us, debt, seq, applied} × n, now_us
//
// where seq is the sequence the call wrote the entry's state at (0 when it
// was not written, or with no era) and applied the units its write debited
// (below 0: gave back; 0 when it wrote none).
//
// A settlement gives back final − cost units when final is smaller (a
// bucket no more than the refill it cannot have lost to its capacity since
// the admission, which left it reset_after_us from full; a window only while the window of now_us is the stored one)
// and debits the rest past empty when it is larger: a bucket's refill is
// then credited from a time after now (at most 2^50 µs after), a window
// counts past its rate (a sliding window up to twice it). With a record,
// the cost already settled replaces the reservation: settling again applies
// only the difference. The answer is what a request of the reserved cost
// would get now (allowed, retry), the units available now (remaining,
// reset, nothing debited) and the units owed past empty (debt: a bucket's
// refill to pay before it credits any, a window's count past its rate).
// Settling at the reserved cost (final = cost) writes no state: it is how
// the store peeks at a state's debt. In overdraw mode a cost that fits is
// admitted as by the decide script, with its answer; one that does not is debited past
// empty and answers allowed 0, then as a settlement does (for a cost above
// the capacity, the capacity's wait). Each written state gets SET … PX
// (a fixed window's until its window ends), an idle one DEL; each record
// SET … PX ARGV[2]; in mode 3 the markers are then deleted.
// internal/algo's Settle and Overdraw mirror it.
//
// A Redis Cluster cannot decide keys of several slots in one call, so a
// set spread over slots is decided one slot per decide call; when one slot
// denies, the store refunds each slot that admitted with a settle call:
// each entry settled at final cost 0 against the decide call's reply
// (its now_us and reset_after_us), recorded under one random id per refund
// (so a copy run again gives back nothing more), in mode 3 when the decide
// call set markers (the denied set leaves no trace), else mode 1.
//
// # Seat
//
// In-flight seats of one identity: a sorted set of the ids holding one,
// scored by their expiry (µs on the server's clock), and beside it the
// recent mean time the identity's seats were held. One call carries
// m ≥ 1 operations, run in order at one server time (the store folds
// concurrent seat calls into one):
//
//	KEYS[2j-1]       operation j's identity's seats, {tag}:if
//	KEYS[2j]         its mean hold time in µs, {tag}:ih
//	ARGV[1]          the era (see Lineage; seats have none, but a call waits
//	                 for its primary to be verified as every stamped call does)
//	ARGV[2]          how long a mean hold time is kept, in ms (release)
//	ARGV[4j-1]       operation j: acquire, renew, release, count or hold
//	ARGV[4j]         the most seats the identity has (acquire)
//	ARGV[4j+1]       the seat's id
//	ARGV[4j+2]       its TTL in µs (acquire, renew); for release, how long
//	                 it was held in µs (0: unknown); for hold, the instant it
//	                 expires (µs)
//
// Every operation but count first drops the expired seats. acquire takes a
// seat when fewer than ARGV[4j-1] are held, or renews the id's when it
// holds one; renew only renews. Both reply {allowed (0|1), held, reused
// (0|1), retry_after_us, now_us, hold_us}, where a denied acquire's
// retry_after_us is the time until the first held seat expires and hold_us
// the mean hold time (0 when unknown, and in every other reply); each
// change sets the key's PX to its last seat's expiry. release removes the
// id, folds a known hold time into the mean (an exponential mean, each
// hold weighing 1/8; the first is taken as it is), sets the mean's PX to
// ARGV[2] and replies {1, now_us}; count replies {held, now_us} without
// writing; hold (a seat restored after a failover) adds the id until the
// instant given, whatever the limit, unless that has passed, and replies
// {1, now_us}. The reply is the operations' replies one after the other.
//
// # Admit
//
// A call limited both in flight and by rate takes its seat and its debits
// in one call. KEYS and ARGV are a decide call's, then the seat script's:
//
//	KEYS[1..k]       the decide call's KEYS, its lineage key last
//	KEYS[k+1]        the identity's seats, {tag}:if
//	KEYS[k+2]        its mean hold time, {tag}:ih
//	ARGV[1..a]       the decide call's ARGV
//	ARGV[a+1]        the most seats the identity has
//	ARGV[a+2]        the seat's id
//	ARGV[a+3]        its TTL in µs
//
// Expired seats are dropped first. When no seat is free (and the id holds
// none), the reply is the seat script's denied acquire, six integers, and
// nothing is judged. Otherwise the entries are judged exactly as the decide
// call would (same writes), and the seat is taken (or the id's renewed)
// only when every entry was admitted (or replayed); otherwise the id holds
// none. The reply is six integers, then the decide call's reply:
//
//	{seat (1 taken, 2 free but not taken: an entry denied), held, reused (0|1), 0, now_us, 0}, decide reply
//
// # Finish
//
// The end of calls in one call: a settle call's settlements, then the
// release of m in-flight seats, as the seat script releases them.
//
//	KEYS[1..k]       the settle call's KEYS, its lineage key last (none when
//	                 it settles nothing)
//	KEYS[k+2j-1]     seat j's identity's seats, {tag}:if
//	KEYS[k+2j]       its mean hold time, {tag}:ih
//	ARGV[1..a]       the settle call's ARGV (the era alone when k is 0)
//	ARGV[a+2j-1]     seat j's id
//	ARGV[a+2j]       how long it was held in µs (0: unknown)
//	ARGV[a+2m+1]     how long a mean hold time is kept, in ms
//	ARGV[a+2m+2]     m
//
// The reply is the settle call's reply, or {now_us} when it settles
// nothing.
//
// # Reset
//
// Forgets one identity's state under one algorithm; its request-id markers
// stay.
//
//	KEYS[1]          the state key, as in the decide call
//
// The reply is {deleted (0|1)}.
//
// # Share
//
// The members sharing one limit, each in a group (a region and its
// replicas; a member without a group is a group of its own), in one hash:
//
//	"#"        "groups floor limit born": what every report must agree on
//	           (only when groups > 0), and when the key was made (µs)
//	"m"<name>  a member: "seq window share until demand group", share its
//	           grant or what it said it holds (whichever is more), until
//	           its lease's end (µs), group "" for itself
//	"g"<name>  a group of a window: "window bound used before until",
//	           bound what the group may have used of window (its ceilings
//	           whose lease ended, what it said it used), before the same
//	           for the window before, until how long the store keeps it
//
// and a mark of the store's memory on the hash's slot, "born run_id": when
// the server process run_id first wrote it (µs).
//
//	KEYS[1]          the limit's hash, <prefix>{!sh<n>}/<key>:sh
//	KEYS[2]          the mark, <prefix>{!sh<n>}:mark, on the same slot
//	ARGV[1]          'report', or 'look' (then ARGV[2] the window, ARGV[3]
//	                 the lease, µs)
//	ARGV[2], [3]     the member (1 to 128 printable bytes), its group ("")
//	ARGV[4]          the member's report number, 0 for unordered
//	ARGV[5], [6]     groups (0: open, then the floor is 0), the floor
//	ARGV[7]          the limit, 1 to 10^12 units
//	ARGV[8]          the window's number, 0 for a rate
//	ARGV[9], [10]    the member's demand; its group's use of the window
//	ARGV[11]         what the member may use until it hears the answer
//	ARGV[12], [13]   the lease, how long a group's use of a window is kept
//	                 (µs)
//	ARGV[14]         the most members the hash holds
//
// With groups > 0 the script first reads the mark: missing, or written by
// another server process (INFO server's run_id: a restart, a failover to
// another server), it is written anew and the store may have forgotten
// grants in force; for a lease from the mark's time every grant is at
// most max(floor, what the member holds): not what the hash says its
// group's other members hold, which may be from before the loss. It then sets apart the fields whose until has passed (a
// window member's share folds into its group's bound), and refuses,
// writing nothing, a report that disagrees with "#" or names more groups
// than groups ({-1, ...}), one for a window older than the member's or
// than another group's by more than one ({-2, ...}), one whose number is
// not above the member's last ({-3, ...}), and, when ARGV[14] other
// members already hold a share, answers {0, 0, members, now_us, 0}. A
// group's share is the largest its members hold (of a window, at least
// its bound); its demand their demands summed. The group's fair share:
//
//   - of a rate, the floor plus the water-filling (from the smallest ask,
//     the caller's group after the others of its own ask, each share
//     rounded down) of the limit less every floor among the asks beyond
//     the floors, plus its part of half the spare (what the shares leave,
//     split among the groups: headroom; the other half waits for groups
//     that join or grow);
//   - of a window, the group's use (at least the floor) plus the same
//     water-filling, among the demands, of what every group's use leaves
//     (at most twice the demands).
//
// While the key is younger than a lease, a group that has not reported
// counts as asking an equal split of a rate (as much as the caller of a
// window). The grant is max(floor, min(fair, limit - every other group's
// share (at least its floor; an unknown group's floor))), or the share
// its group holds when the grant comes within 1/64 of it (at least one
// unit), capped alike: its members then hold one share, not the swings of
// their demands (a settling store caps it at max(floor, ARGV[11])). The member's
// field is written with max(grant, ARGV[11]), the group's use folded into
// its record, and the hash's and the mark's PX set to the longest they
// must live (the mark at least a day). The reply is
//
//	{granted, fair, members, now_us, settling_us, (group, members, share, demand, used, left_us) × other groups}
//
// the groups sorted by name; settling_us is what is left of the lease
// after the mark. A look answers the same of every group, writing nothing,
// with granted and fair 0. store.Memory's Share mirrors it.
//
// # Restore
//
// Brings a primary that took keys over from another (a promoted replica, a
// restarted node) up to date with the writes of the other that it does not
// hold: each entry is one write the store journaled, or several writes of
// one key that the store found the primary lacks, summed.
//
//	KEYS[3i-2]       entry i's state key
//	KEYS[3i-1]       its request-id marker (aux 1) or settlement record
//	                 (aux 2); its state key again when it has neither
//	KEYS[3i]         the restoring store's record of what it restored on
//	                 the key, {tag}:<alg>:x:<store>
//	KEYS[#KEYS]      the lineage key of the entries' slot
//	ARGV[1]          the era (see Lineage): this primary's
//	ARGV[2]          how long a restore record lives, in ms
//	ARGV[3+14(i-1)..] entry i: algorithm, rate, period, capacity; delta, the
//	                 units the writes debited past empty (below 0: gave
//	                 back); for a give-back its admission's now_us and
//	                 reset_after_us (as the settle script takes them); the
//	                 first write's call's seq and its era; when the effect ends (µs,
//	                 the server's clock); aux (0 none, 1 marker, 2 record);
//	                 the record's value; when the marker or record ends
//	                 (µs); the last write's seq
//
// An entry is held when the lineage the slot had as the call began names
// its era with a sequence at least its own (or names it as prev with a
// base at least its own), or when the store's restore record names its era
// with a sequence at least its own. An entry not held is applied, in
// order, as the settle script settles a delta (a debit past empty, or a
// give-back), with its marker restored (SET NX) or its record set, unless
// its effect has ended by now, or a later entry of the same key's has: a
// state that refilled, or a window that closed, holds nothing of the
// writes before. Each key written is written once and its restore record
// set to the last entry applied (its era and last seq); the slot's lineage
// is written once, with this call's era. The reply is three integers per
// entry, then the server time:
//
//	{applied (0|1), seq, keep_us} × n, now_us
//
// where seq is the sequence this call wrote the entry's key at and keep_us
// how long its state matters (both 0 when the key was not written).
package lua
