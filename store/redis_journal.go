package store

import (
	"github.com/tollgate/tollgate/store/internal/failover"
)

// What the store journals, from each call it made and its reply: the
// writes a failover could lose (docs/reliability.md#failovers). Each is
// journaled where its reply is read, by whoever read it, so that a write
// whose caller left at its deadline is journaled too; a call stamped with
// no era (its primary has no replica: see Exactness) journals nothing.

// writes appends to dst what c, a call answered without an error, wrote:
// each entry's debit when the call admitted and debited, and its
// request-id marker; the seat taken, renewed or released; a settle or
// finish call's settlements and releases.
func (c *call) writes(dst []failover.Entry) []failover.Entry {
	if c.err != nil || c.era == "" {
		return dst
	}
	switch {
	case c.seat != nil:
		return c.seatWrites(dst)
	case c.settle != nil:
		return c.settle.writes(dst, c.era)
	case c.finish != nil:
		return c.finish.writes(dst, c.era)
	}
	if c.mode.peek || c.entries == 0 {
		return dst
	}
	if a := c.admit; a != nil && !(a.judged && a.answer.Allowed) {
		return dst // no seat taken: nothing judged, or every entry denied
	}
	for i := range c.entries {
		if d := c.decisions[i]; !d.Allowed || d.Replayed || c.seqs[i] == 0 {
			return dst // all or nothing: nothing was written
		}
	}
	h := c.mode.header()
	for i := range c.entries {
		g := c.argv[h+entryArgs*i:]
		w := failover.Write{Key: c.keys[i], Lineage: c.lineage, Alg: g[0], Rate: g[1], Period: g[2], Capacity: g[3], Delta: g[4]}
		if c.mode.markers() {
			w.Aux, w.AuxKind, w.AuxUntil = c.keys[c.entries+i], failover.AuxMarker, c.now+1000*c.mode.ttlMs
		}
		dst = append(dst, failover.Entry{Era: c.era, Seq: c.seqs[i], At: c.now, Expires: c.now + c.decisions[i].ResetAfter.Microseconds(), Write: w})
	}
	if a := c.admit; a != nil {
		dst = append(dst, failover.Entry{Era: c.era, At: c.now, Expires: c.now + a.seat.TTL.Microseconds(),
			Write: failover.Write{Key: a.seatKey[0], Aux: a.seatKey[1], Seat: a.seat.ID}})
	}
	return dst
}

// seatWrites appends the seat c, a seat call, took, renewed or released.
func (c *call) seatWrites(dst []failover.Entry) []failover.Entry {
	s := c.seat
	w := failover.Write{Key: c.keys[0], Aux: c.keys[1], Seat: s.args[9].(string)}
	e := failover.Entry{Era: c.era}
	switch s.op {
	case seatAcquire, seatRenew:
		if s.reply[seatAllowed] != 1 {
			return dst
		}
		e.At = s.reply[seatNow]
		e.Expires = e.At + s.args[10].(int64)
	case seatRelease:
		e.At, e.Expires, w.Release = s.reply[1], s.reply[1], true
	default:
		return dst
	}
	e.Write = w
	return append(dst, e)
}

// writes appends what p, a settle part answered, wrote, stamped with era:
// each entry's units applied, and the record it set.
func (p *settlePart) writes(dst []failover.Entry, era string) []failover.Entry {
	if era == "" || p.mode == settleLook || len(p.reply) != settleReplyLen*len(p.states) {
		return dst
	}
	for k, key := range p.states {
		g := p.reply[settleReplyLen*k:]
		if g[settleSeq] == 0 {
			continue // nothing written
		}
		a := p.argv[settleEntryArgs*k:]
		w := failover.Write{Key: key, Lineage: p.lineage, Delta: g[settleApplied], Alg: a[0], Rate: a[1], Period: a[2], Capacity: a[3], DebitedAt: a[6], AdmReset: a[7]}
		if p.records != nil {
			w.Aux, w.AuxKind, w.AuxValue, w.AuxUntil = p.records[k], failover.AuxRecord, a[5], p.now+1000*p.ttlMs
		}
		dst = append(dst, failover.Entry{Era: era, Seq: g[settleSeq], At: p.now, Expires: p.now + g[settleResetAfter], Write: w})
	}
	return dst
}

// writes appends what f, a finish call answered, wrote, stamped with era:
// its settlements and the seats it released.
func (f *finishPart) writes(dst []failover.Entry, era string) []failover.Entry {
	if era == "" {
		return dst
	}
	if f.settle != nil {
		dst = f.settle.writes(dst, era)
	}
	for i, k := range f.seats {
		dst = append(dst, failover.Entry{Era: era, At: f.now, Expires: f.now, Write: failover.Write{Key: k[0], Aux: k[1], Seat: f.ids[i], Release: true}})
	}
	return dst
}

// journal journals what calls wrote, in one go: the journal takes its
// lock once for them all.
func (r *road) journal(calls ...*call) {
	if r.failover == nil {
		return
	}
	var buf [8]failover.Entry
	w := buf[:0]
	for _, c := range calls {
		w = c.writes(w)
	}
	if len(w) > 0 {
		r.failover.Add(w...)
	}
}
