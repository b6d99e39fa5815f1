package failover

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/lua"
)

// The restore: what a new primary lacks of the writes its predecessor's
// era journaled, found by the lineage of their slots and applied by the
// restore script (lua/doc.go, Restore); seats by the seat script.

// errBadReply means a script answered something other than lua/doc.go
// says: the scripts on the server are not the ones this package was built
// with.
var errBadReply = errors.New("script reply is not what lua/doc.go says the script answers")

const (
	// restoreArgs is how many ARGV each entry of a restore call takes.
	restoreArgs = 14
	// restoreReplyLen is how many integers it answers per entry: applied,
	// seq, keep.
	restoreReplyLen = 3
	// restoreChunk is the most entries one restore call carries: the
	// entries of one key are never split between calls.
	restoreChunk = 64
)

// restoreCall is one script call of a restore: the entries it sends
// (several writes of a key summed into one where they can be), and for
// each the journal's entries it stands for.
type restoreCall struct {
	sc      ScriptCall
	sent    []restoreEntry
	seats   bool
	entries []Entry // every entry the call stands for, for a failure
}

// restoreEntry is one entry of a restore call: a write, or the writes of
// one key summed (last is the last one's sequence), standing for writes of
// the journal.
type restoreEntry struct {
	Entry
	last   int64
	writes []Entry
}

// Restore applies entries (see Restorer). It reads first the
// lineage of every slot the entries' writes were made on, in one
// pipeline, and leaves out the writes the new primary holds; the others
// of one key are summed where they can be (debits with no marker or
// record beside them, one after the other). Then restore script calls,
// grouped by lineage key (a slot), the entries of one key together in the
// order of their sequences (the script compares each with the slot's
// lineage again); and the seats as seat script calls; all in one pipeline
// under ctx. What each call applied
// is journaled again, in the era it was stamped with: restored on a new
// primary, a write is that primary's to lose.
func (f *Client) Restore(ctx context.Context, entries []Entry) (applied, held int, failed []Entry, err error) {
	var states, seats []Entry
	for _, e := range entries {
		if e.Write.Seat != "" {
			seats = append(seats, e)
		} else {
			states = append(states, e)
		}
	}
	slices.SortStableFunc(states, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Write.Key, b.Write.Key), cmp.Compare(a.Seq, b.Seq))
	})
	states, held = f.lacked(ctx, states)
	calls := append(f.restoreStates(sumWrites(states)), f.restoreSeats(seats)...)
	if len(calls) == 0 {
		f.journal.Held(held)
		return 0, held, nil, nil
	}
	sc := make([]ScriptCall, len(calls))
	for i := range calls {
		sc[i] = calls[i].sc
	}
	f.cfg.Run(ctx, sc)
	for i, c := range calls {
		c.sc = sc[i]
		a, h, e := f.restored(c)
		if e != nil {
			failed, err = append(failed, c.entries...), e
			continue
		}
		applied, held = applied+a, held+h
	}
	f.journal.Restored(applied)
	f.journal.Held(held)
	return applied, held, failed, err
}

// lacked returns the entries (sorted by key and sequence) the lineage of
// their slots, read now, does not hold, and how many it holds. A slot
// whose lineage could not be read keeps all its entries: the restore
// script compares them.
func (f *Client) lacked(ctx context.Context, entries []Entry) ([]Entry, int) {
	if len(entries) == 0 {
		return nil, 0
	}
	pipe := f.cfg.Client.Pipeline()
	gets := map[string]*redis.StringCmd{}
	for _, e := range entries {
		if _, ok := gets[e.Write.Lineage]; !ok {
			gets[e.Write.Lineage] = pipe.Get(ctx, e.Write.Lineage)
		}
	}
	_, _ = pipe.Exec(ctx)
	out, held := entries[:0], 0
	for _, e := range entries {
		get := gets[e.Write.Lineage]
		if v, err := get.Result(); (err == nil || err == redis.Nil) && parseLineage(v).holds(e.Era, e.Seq) {
			held++
			continue
		}
		out = append(out, e)
	}
	return out, held
}

// lineage is a slot's lineage (lua/lineage_read.lua), as the restore
// script reads it.
type lineage struct {
	seq       int64
	era       string
	base      int64
	prev      string
	hasLineal bool
}

// parseLineage reads a lineage key's value ("" when the key is absent).
func parseLineage(value string) lineage {
	f := strings.Fields(value)
	var l lineage
	if len(f) != 2 && len(f) != 4 {
		return lineage{}
	}
	var err error
	if l.seq, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return lineage{}
	}
	l.era, l.hasLineal = f[1], true
	if len(f) == 4 {
		if l.base, err = strconv.ParseInt(f[2], 10, 64); err != nil {
			return lineage{}
		}
		l.prev = f[3]
	}
	return l
}

// holds reports whether the lineage holds the write of era at seq, as the
// restore script decides.
func (l lineage) holds(era string, seq int64) bool {
	switch {
	case !l.hasLineal:
		return false
	case l.era == era:
		return seq <= l.seq
	case l.prev == era:
		return seq <= l.base
	}
	return false
}

// sumWrites sums, key by key, the debits with nothing beside them that
// follow one another in entries (sorted by key and sequence) into one
// entry each: the first one's sequence and era, the last one's sequence
// and end, the units of all. A write with a marker or a record, a
// give-back, or a write of another era stays an entry of its own.
func sumWrites(entries []Entry) []restoreEntry {
	var out []restoreEntry
	for _, e := range entries {
		if n := len(out); n > 0 && plain(e) {
			p := &out[n-1]
			if plain(p.Entry) && p.Write.Key == e.Write.Key && p.Era == e.Era && p.Write.Alg == e.Write.Alg &&
				p.Write.Rate == e.Write.Rate && p.Write.Period == e.Write.Period && p.Write.Capacity == e.Write.Capacity {
				p.Write.Delta += e.Write.Delta
				p.Expires = max(p.Expires, e.Expires)
				p.last = e.Seq
				p.writes = append(p.writes, e)
				continue
			}
		}
		out = append(out, restoreEntry{Entry: e, last: e.Seq, writes: []Entry{e}})
	}
	return out
}

// plain reports whether e is a debit with nothing beside it.
func plain(e Entry) bool { return e.Write.AuxKind == AuxNone && e.Write.Delta > 0 }

// restored journals what c applied, from its reply, and returns how many
// writes it applied and how many the primary held.
func (f *Client) restored(c restoreCall) (applied, held int, err error) {
	v, err := c.sc.Reply, c.sc.Err
	if err != nil {
		return 0, 0, err
	}
	era := c.sc.Era
	if c.seats {
		// One reply of two integers per operation: {1, now_us}.
		if len(v) != 2*len(c.entries) {
			return 0, 0, errBadReply
		}
		for _, e := range c.entries {
			e.Era, e.Seq = era, 0
			f.Add(e)
		}
		return len(c.entries), 0, nil
	}
	if len(v) != restoreReplyLen*len(c.sent)+1 {
		return 0, 0, errBadReply
	}
	now := v[len(v)-1]
	for k, e := range c.sent {
		g := v[restoreReplyLen*k:]
		if g[0] != 1 {
			held += len(e.writes)
			continue
		}
		applied += len(e.writes)
		f.restoredUnits.Add(max(e.Write.Delta, 0))
		if g[1] > 0 {
			r := e.Entry
			r.Era, r.Seq, r.At, r.Expires = era, g[1], now, now+g[2]
			f.Add(r)
		}
	}
	return applied, held, nil
}

// restoreStates lays out entries (sorted by key) as restore calls: grouped
// by lineage key (a slot, and a store's prefix), at most restoreChunk
// entries a call but never a key split.
func (f *Client) restoreStates(entries []restoreEntry) []restoreCall {
	groups := map[string][]restoreEntry{}
	var order []string
	for _, e := range entries {
		k := e.Write.Lineage
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	var out []restoreCall
	for _, k := range order {
		g := groups[k]
		for len(g) > 0 {
			n := min(len(g), restoreChunk)
			for n < len(g) && g[n].Write.Key == g[n-1].Write.Key {
				n++ // the rest of the key's entries
			}
			c := restoreCall{sc: ScriptCall{Script: lua.Restore, Args: f.restoreLayout(g[:n])}, sent: g[:n]}
			for _, e := range g[:n] {
				c.entries = append(c.entries, e.writes...)
			}
			out = append(out, c)
			g = g[n:]
		}
	}
	return out
}

// restoreLayout lays out one restore call (lua/doc.go, Restore): entries
// of one lineage key.
func (f *Client) restoreLayout(entries []restoreEntry) []any {
	args := make([]any, 3, 3+3*len(entries)+3+restoreArgs*len(entries))
	args[2] = int64(3*len(entries) + 1)
	for _, e := range entries {
		aux := e.Write.Aux
		if e.Write.AuxKind == AuxNone {
			aux = e.Write.Key
		}
		args = append(args, e.Write.Key, aux, e.Write.Key+":x:"+f.id)
	}
	args = append(args, entries[0].Write.Lineage, eraNone, f.recordTTL.Milliseconds())
	for _, e := range entries {
		w := e.Write
		args = append(args, w.Alg, w.Rate, w.Period, w.Capacity, w.Delta, w.DebitedAt, w.AdmReset,
			e.Seq, e.Era, e.Expires, w.AuxKind, w.AuxValue, w.AuxUntil, e.last)
	}
	return args
}

// restoreSeats lays out the seat entries as seat script calls, one per
// seat: the last write of each seat wins (held until its expiry, or
// released).
func (f *Client) restoreSeats(entries []Entry) []restoreCall {
	type seat struct{ key, id string }
	last := map[seat]Entry{}
	var order []seat
	for _, e := range entries {
		s := seat{e.Write.Key, e.Write.Seat}
		if _, ok := last[s]; !ok {
			order = append(order, s)
		}
		if p, ok := last[s]; !ok || e.At >= p.At {
			last[s] = e
		}
	}
	var out []restoreCall
	for _, s := range order {
		e := last[s]
		// The seat script's hold (a seat restored: held until an instant,
		// whatever the limit) and release (lua/doc.go, Seat).
		op, ttl := "hold", e.Expires
		if e.Write.Release {
			op, ttl = "release", 0
		}
		args := []any{nil, nil, int64(2), e.Write.Key, e.Write.Aux, eraNone, f.cfg.SeatHoldTTL.Milliseconds(), op, int64(1), e.Write.Seat, ttl}
		out = append(out, restoreCall{sc: ScriptCall{Script: lua.Seat, Args: args}, entries: []Entry{e}, seats: true})
	}
	return out
}
