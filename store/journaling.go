package store

import (
	"github.com/tollgate/tollgate/store/internal/failover"
)

// What the store journals, from each call it made and its reply: the
// writes a failover could lose (docs/reliability.md#failovers). Each is
// journaled where its reply is read, by whoever read it, so that a write
// whose caller left at its deadline is journaled too.

// journalCall journals what c, a decide, admit or seat call answered
// without an error, wrote: each entry's debit when the call admitted and
// debited, and its request-id marker; the seat taken, renewed or released.
func (r *Redis) journalCall(c *call) {
	f := r.failover
	if f == nil || c.err != nil || c.era == "" {
		return
	}
	if c.seat != nil {
		r.journalSeat(c)
		return
	}
	if c.mode.peek || c.entries == 0 {
		return
	}
	if a := c.admit; a != nil && !(a.judged && a.answer.Allowed) {
		return // no seat taken: nothing judged, or every entry denied
	}
	for i := range c.entries {
		if d := c.decisions[i]; !d.Allowed || d.Replayed || c.seqs[i] == 0 {
			return // all or nothing: nothing was written
		}
	}
	h := c.mode.header()
	for i := range c.entries {
		g := c.argv[h+entryArgs*i:]
		w := failover.Write{Key: c.keys[i], Alg: g[0], Rate: g[1], Period: g[2], Capacity: g[3], Delta: g[4]}
		if c.mode.markers() {
			w.Aux, w.AuxKind, w.AuxUntil = c.keys[c.entries+i], auxMarker, c.now+1000*c.mode.ttlMs
		}
		f.add(failover.Entry{Era: c.era, Seq: c.seqs[i], At: c.now, Expires: c.now + c.decisions[i].ResetAfter.Microseconds(), Write: w})
	}
	if a := c.admit; a != nil {
		f.add(failover.Entry{Era: c.era, At: c.now, Expires: c.now + a.seat.TTL.Microseconds(),
			Write: failover.Write{Key: a.seatKey[0], Aux: a.seatKey[1], Seat: a.seat.ID}})
	}
}

// journalSeat journals the seat c, a seat call, took, renewed or released.
func (r *Redis) journalSeat(c *call) {
	s := c.seat
	w := failover.Write{Key: c.keys[0], Aux: c.keys[1], Seat: s.args[9].(string)}
	e := failover.Entry{Era: c.era}
	switch s.op {
	case seatAcquire, seatRenew:
		if s.reply[seatAllowed] != 1 {
			return
		}
		e.At = s.reply[seatNow]
		e.Expires = e.At + s.args[10].(int64)
	case seatRelease:
		e.At, e.Expires, w.Release = s.reply[1], s.reply[1], true
	default:
		return
	}
	e.Write = w
	r.failover.add(e)
}

// journalSettle journals what a settle script call wrote, from its keys
// (the state keys, then the records when its mode keeps them), its ARGV
// from the era on, and its reply: each entry's units applied, and the
// record it set.
func (r *Redis) journalSettle(keys []string, argv []any, reply []int64) {
	f := r.failover
	if f == nil || len(argv) < 3 {
		return
	}
	era, _ := argv[0].(string)
	mode, _ := argv[1].(int64)
	if era == "" || mode == settleLook {
		return
	}
	n := (len(argv) - 3) / settleArgs
	if len(reply) != settleReplyLen*n+1 {
		return
	}
	records := mode == settleRecord || mode == settleRefund
	ttl, _ := argv[2].(int64)
	now := reply[len(reply)-1]
	for k := range n {
		g := reply[settleReplyLen*k:]
		if g[settleSeq] == 0 {
			continue // nothing written
		}
		a := argv[3+settleArgs*k:]
		w := failover.Write{Key: keys[k], Delta: g[settleApplied]}
		w.Alg, w.Rate, w.Period, w.Capacity, w.DebitedAt, w.AdmReset = a[0].(int64), a[1].(int64), a[2].(int64), a[3].(int64), a[6].(int64), a[7].(int64)
		if records {
			w.Aux, w.AuxKind, w.AuxValue, w.AuxUntil = keys[n+k], auxRecord, a[5].(int64), now+1000*ttl
		}
		f.add(failover.Entry{Era: era, Seq: g[settleSeq], At: now, Expires: now + g[settleResetAfter], Write: w})
	}
}

// journalSettleCall journals what sc, a settle script call answered, wrote.
func (r *Redis) journalSettleCall(sc scriptCall) {
	if r.failover == nil || sc.cmd == nil {
		return
	}
	v, err := sc.cmd.(scriptCmd).Result()
	if err != nil {
		return
	}
	i, ok := eraAt(sc.args)
	if !ok {
		return
	}
	keys := make([]string, 0, i-3)
	for _, k := range sc.args[3:i] {
		s, _ := k.(string)
		keys = append(keys, s)
	}
	r.journalSettle(keys, sc.args[i:], v)
}

// journalFinish journals what sc, a finish script call of settles entries
// (its settle call's ARGV first) and the seats of release, wrote.
func (r *Redis) journalFinish(sc scriptCall, settleKeys int, release int) {
	if r.failover == nil || sc.cmd == nil {
		return
	}
	v, err := sc.cmd.(scriptCmd).Result()
	if err != nil {
		return
	}
	i, ok := eraAt(sc.args)
	if !ok {
		return
	}
	era, _ := sc.args[i].(string)
	if era == "" {
		return
	}
	keys := make([]string, 0, settleKeys)
	for _, k := range sc.args[3 : 3+settleKeys] {
		s, _ := k.(string)
		keys = append(keys, s)
	}
	settleArgv := sc.args[i : len(sc.args)-2-2*release]
	if settleKeys > 0 {
		r.journalSettle(keys, settleArgv, v)
	}
	now := v[len(v)-1]
	seats := sc.args[3+settleKeys : 3+settleKeys+2*release]
	ids := sc.args[len(sc.args)-2-2*release:]
	for j := range release {
		key, _ := seats[2*j].(string)
		hold, _ := seats[2*j+1].(string)
		id, _ := ids[2*j].(string)
		r.failover.add(failover.Entry{Era: era, At: now, Expires: now, Write: failover.Write{Key: key, Aux: hold, Seat: id, Release: true}})
	}
}
