package store

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// settlePart is what makes a call a settle call: one part's entries of a
// settle script call (lua/doc.go, Settle), kept as keys and numbers so
// that concurrent settle calls of one mode share one script call, as
// decisions share batch script calls; and once answered, the answers.
type settlePart struct {
	mode, ttlMs int64
	// states are the entries' state keys; records their records (modes
	// settleRecord and settleRefund); markers the request-id markers a
	// refund deletes (settleRefund).
	states, records, markers []string
	lineage                  string  // the lineage key of their slot (lua/doc.go, Lineage)
	argv                     []int64 // settleEntryArgs per entry
	// Written by whoever runs the call: settleReplyLen integers per entry,
	// and the server time.
	reply []int64
	now   int64
}

// settleRecords says how a settle call records what it settled: its mode;
// in the modes with records, their TTL and, when id is set, the one id
// every entry's record is named by (else each request's RequestID); in
// settleRefund, the markers to delete, one per entry.
type settleRecords struct {
	mode    int64
	ttlMs   int64
	id      string
	markers []string
}

// recordsFor returns how a settle of mode keeps records: settleRecord's
// for the store's replay TTL.
func (p replays) records(mode int64) settleRecords {
	if mode == settleRecord {
		return settleRecords{mode: mode, ttlMs: p.ttlMs()}
	}
	return settleRecords{mode: mode}
}

// newSettlePart lays out the entries of the requests part names, whose
// state keys are states[i], settled at costs against admitted, as rec
// says.
func (k *keySpace) settlePart(reqs []tollgate.Request, states []string, admitted []tollgate.Admission, costs []int64, part []int, rec settleRecords) *settlePart {
	p := &settlePart{mode: rec.mode, markers: rec.markers, states: make([]string, 0, len(part)), argv: make([]int64, 0, settleEntryArgs*len(part))}
	p.lineage = k.lineage.of(states[part[0]])
	records := rec.mode == settleRecord || rec.mode == settleRefund
	if records {
		p.ttlMs, p.records = rec.ttlMs, make([]string, 0, len(part))
	}
	for _, i := range part {
		k := states[i]
		p.states = append(p.states, k)
		if records {
			id := rec.id
			if id == "" {
				id = reqs[i].RequestID
			}
			p.records = append(p.records, recordKey(k, id))
		}
		q := algo.ParamsOf(reqs[i])
		at := int64(0)
		if !admitted[i].At.IsZero() {
			at = admitted[i].At.UnixMicro()
		}
		p.argv = append(p.argv, int64(reqs[i].Limit.Algorithm), q.Rate, q.Period, q.Capacity, q.Cost, costs[i], at, admitted[i].ResetAfter.Microseconds())
	}
	return p
}

// foldsWith reports whether p and o can share one settle script call: the
// same mode and records' TTL, no markers (a refund's layout is its own).
func (p *settlePart) foldsWith(o *settlePart) bool {
	return p.mode == o.mode && p.ttlMs == o.ttlMs && p.markers == nil && o.markers == nil && p.mode != settleRefund
}

// settleArgs lays out parts (of one mode and one slot, foldsWith one
// another) as one settle script call: EVALSHA sha numkeys KEYS... lineage
// era mode ttl ARGV....
func settleArgs(parts []*settlePart) []any {
	nkeys, nargv := 1, 0 // the lineage key
	for _, p := range parts {
		nkeys += len(p.states) + len(p.records) + len(p.markers)
		nargv += len(p.argv)
	}
	args := make([]any, 3, 3+nkeys+3+nargv)
	args[2] = int64(nkeys)
	for _, p := range parts {
		for _, k := range p.states {
			args = append(args, k)
		}
	}
	for _, p := range parts {
		for _, k := range p.records {
			args = append(args, k)
		}
	}
	for _, p := range parts {
		for _, k := range p.markers {
			args = append(args, k)
		}
	}
	args = append(args, parts[0].lineage, eraNone, parts[0].mode, parts[0].ttlMs)
	for _, p := range parts {
		for _, v := range p.argv {
			args = append(args, v)
		}
	}
	return args
}

// readSettles gives each part its answers from cmd's reply, their settle
// script call's, or returns the call's error.
func readSettles(cmd redis.Cmder, parts []*settlePart) error {
	v, err := cmd.(scriptCmd).Result()
	if err != nil {
		return err
	}
	n := 0
	for _, p := range parts {
		n += len(p.states)
	}
	if len(v) != settleReplyLen*n+1 {
		return errBadReply
	}
	now := v[len(v)-1]
	for _, p := range parts {
		k := settleReplyLen * len(p.states)
		p.reply, p.now, v = v[:k:k], now, v[k:]
	}
	return nil
}

// decisions puts p's answers into out, at the places of the requests of
// part.
func (p *settlePart) decisions(part []int, out []tollgate.Decision) {
	at := time.UnixMicro(p.now)
	for k, i := range part {
		g := settleReply(p.reply[settleReplyLen*k:])
		out[i] = tollgate.Decision{
			Allowed: g[settleAllowed] == 1, Remaining: g[settleRemaining], RetryAfter: micros(g[settleRetryAfter]),
			ResetAfter: micros(g[settleResetAfter]), Debt: g[settleDebt], At: at,
		}
	}
}

// settleCall returns a call carrying p, to send through the batcher.
func settleCall(ctx context.Context, p *settlePart) *call {
	c := calls.Get().(*call)
	c.entries, c.mode, c.admit, c.seat, c.settle, c.finish = len(p.states), decideMode{}, nil, nil, p, nil
	c.keys = p.states // the first one's slot routes the call
	c.now, c.err, c.era = 0, nil, ""
	c.deadline, _ = ctx.Deadline()
	return c
}

// settleParts sends the settle calls of parts, each through its primary's
// batcher, all at once, and puts their answers into out (at part's
// places); the first error wins. A call whose caller left is abandoned to
// its runner, which journals what it wrote.
func (r *road) settleParts(ctx context.Context, ps []*settlePart, parts [][]int, out []tollgate.Decision) error {
	cs := make([]*call, len(ps))
	sent := make([]error, len(ps))
	send := func(j int) {
		cs[j] = settleCall(ctx, ps[j])
		sent[j] = r.send(ctx, cs[j])
	}
	if len(ps) == 1 {
		send(0)
	} else {
		var wg sync.WaitGroup
		for j := range ps {
			wg.Go(func() { send(j) })
		}
		wg.Wait()
	}
	var first error
	for j, p := range ps {
		if sent[j] != nil { // abandoned to its runner: not to be touched again
			first = cmp.Or(first, sent[j])
			continue
		}
		if err := cs[j].err; err != nil {
			first = cmp.Or(first, err)
		} else {
			p.decisions(parts[j], out)
		}
		cs[j].settle = nil
		calls.Put(cs[j])
	}
	return first
}

// settleFold is the settle calls of one batch that share one settle script
// call (see foldsWith).
type settleFold struct {
	calls []*call
	sc    scriptCall
}

// foldSettles splits own, a batch's calls sent as script calls of their
// own, into folds of its settle calls (at least two in a fold, at most
// maxShared entries) and the calls left on their own. With bySlot (a
// Cluster) only calls on one Cluster slot share a fold.
func foldSettles(own []*call, bySlot bool) ([]*settleFold, []*call) {
	type group struct {
		slot  int
		calls []*call
	}
	var groups []*group
	var rest []*call
	for _, c := range own {
		if c.settle == nil {
			rest = append(rest, c)
			continue
		}
		k := 0
		if bySlot {
			k = slot(c.keys[0])
		}
		var g *group
		for _, h := range groups {
			if h.slot == k && h.calls[0].settle.foldsWith(c.settle) {
				g = h
				break
			}
		}
		if g == nil {
			g = &group{slot: k}
			groups = append(groups, g)
		}
		g.calls = append(g.calls, c)
	}
	var out []*settleFold
	for _, g := range groups {
		cs := g.calls
		for len(cs) > 0 {
			n, entries := 0, 0
			for n < len(cs) && (n == 0 || entries+cs[n].entries <= maxShared) {
				entries += cs[n].entries
				n++
			}
			if n == 1 {
				rest = append(rest, cs[0])
			} else {
				f := &settleFold{calls: cs[:n]}
				parts := make([]*settlePart, n)
				for i, c := range cs[:n] {
					parts[i] = c.settle
				}
				f.sc = scriptCall{script: settleScript, args: settleArgs(parts)}
				out = append(out, f)
			}
			cs = cs[n:]
		}
	}
	return out, rest
}

// read gives each call of f its answers from cmd, the fold's reply, or the
// error for every call.
func (f *settleFold) read(cmd redis.Cmder) {
	parts := make([]*settlePart, len(f.calls))
	for i, c := range f.calls {
		parts[i] = c.settle
	}
	if err := readSettles(cmd, parts); err != nil {
		for _, c := range f.calls {
			c.err = err
		}
	}
}
