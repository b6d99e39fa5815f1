package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/tollgate/tollgate"
)

// AllowAll decides reqs all or nothing (see tollgate.Store).
//
// On a single node or through Sentinel the whole set is one script call,
// atomic like a single decision. On a ClusterClient the set is split by
// Cluster slot (the keys of one call must share one), one call per slot:
// first the part most likely to deny (the fewest calls left as this store
// last saw them; see levels), then, when it admits, the others at once.
// When one of those denies, the debits of the slots that admitted are
// given back by settle script calls before AllowAll returns (refund.go;
// see docs/store.md for the window in which that debit may deny a
// concurrent caller). On any other client (a Ring) the set is split by hash tag, as the client shards
// by it. An error from Redis leaves the set's outcome unknown for the
// slots whose reply was lost; the debits known are given back.
//
// The set is checked, laid out once (its keys and its parts; see layout),
// then decided: as an overdraw, with one decide call when it is one part,
// or in parts (allowParts).
func (r *Redis) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	reqs, err := normalizeAll(reqs)
	if err != nil {
		return nil, err
	}
	for _, req := range reqs {
		r.persistence.note(req.Limit, &r.road)
	}
	// An overdraw is a settle call, which keeps no request-id markers.
	var mode decideMode
	if !reqs[0].Overdraw {
		mode = r.replays.modeFor(reqs[0].RequestID, setReplayTTL(reqs))
	}
	lay := r.keys.layOut(reqs, mode.markerID())
	if reqs[0].Overdraw {
		return r.overdraw(ctx, reqs, lay)
	}
	if len(lay.parts) == 1 {
		c := r.keys.newCall(ctx, reqs, lay.keys, mode)
		if err := r.send(ctx, c); err != nil {
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", err)
		}
		if c.err != nil {
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", c.err)
		}
		out := c.decisions // a call of several entries has a slice of its own
		if c.entries == 1 {
			out = slices.Clone(out) // the call's own array, which goes back to the pool
		}
		calls.Put(c)
		return out, nil
	}
	out, err := r.allowParts(ctx, reqs, lay, mode)
	if err != nil {
		return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", err)
	}
	return out, nil
}
