package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
)

// replay debits again, on the primaries now serving them, the admissions
// flagged for replay: all at once per identity, whether or not they fit,
// except a fixed window's admission once its window has ended (it counts
// for nothing any more) and an admission whose request-id marker the new
// primary holds (it arrived). On an error the admissions stay flagged and
// the next tick tries again.
func (w *watcher) replay(ctx context.Context) {
	pending := w.j.pending()
	if len(pending) == 0 {
		return
	}
	done := make(map[uint64]bool, len(pending))
	now := time.Now().UnixMicro()
	var withID []int
	for i, e := range pending {
		switch {
		case e.end != 0 && e.end <= now:
			done[e.seq] = true
		case e.req.RequestID != "":
			withID = append(withID, i)
		}
	}
	if len(withID) > 0 {
		pipe := w.r.client.Pipeline()
		cmds := make([]*redis.IntCmd, len(withID))
		for k, i := range withID {
			req := pending[i].req
			cmds[k] = pipe.Exists(ctx, decisionKeys(w.r.keyPrefix(req.Key), req.Limit.Algorithm, req.Key, req.RequestID)[1])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return
		}
		for k, i := range withID {
			if cmds[k].Val() == 1 {
				done[pending[i].seq] = true
				w.replicated.Add(1)
			}
		}
	}
	type identity struct {
		key   string
		limit tollgate.Limit
	}
	units := map[identity]int64{}
	var order []identity
	for _, e := range pending {
		if done[e.seq] {
			continue
		}
		id := identity{e.req.Key, e.req.Limit}
		if _, ok := units[id]; !ok {
			order = append(order, id)
		}
		units[id] = min(units[id]+e.req.Cost, tollgate.MaxRate)
	}
	reqs := make([]tollgate.Request, 0, len(order))
	var total int64
	for _, id := range order {
		req, err := check.Normalize(tollgate.Request{Key: id.key, Limit: id.limit, Cost: units[id], Overdraw: true})
		if err != nil {
			continue // a journaled request was valid: not reached
		}
		reqs = append(reqs, req)
		total += req.Cost
	}
	for len(reqs) > 0 {
		n := min(len(reqs), replayChunk)
		if _, err := w.r.overdraw(ctx, reqs[:n]); err != nil {
			return // not all replayed: the entries stay flagged, the units are counted again (the safe side)
		}
		reqs = reqs[n:]
	}
	for _, e := range pending {
		if !done[e.seq] {
			w.replayed.Add(1)
		}
		done[e.seq] = true
	}
	w.replayedUnits.Add(total)
	w.j.replayed(done)
}
