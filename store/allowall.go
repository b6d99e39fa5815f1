package store

import (
	"context"
	"fmt"
	"slices"
	"sync"

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
func (r *Redis) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	reqs, err := normalizeAll(reqs)
	if err != nil {
		return nil, err
	}
	for _, req := range reqs {
		r.notePersistence(req.Limit)
	}
	// An overdraw is a settle call, which keeps no request-id markers.
	var mode decideMode
	if !reqs[0].Overdraw {
		mode = r.modeFor(reqs[0].RequestID, setReplayTTL(reqs))
	}
	lay := r.layOut(reqs, mode.markerID())
	if reqs[0].Overdraw {
		return r.overdraw(ctx, reqs, lay)
	}
	parts := lay.parts
	if len(parts) == 1 {
		c := newCall(ctx, reqs, lay.keys, mode)
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

	// A set with a member whose denial is remembered is denied: it is
	// judged without a debit (peek mode), so that its other parts are not
	// debited and given back, which could deny concurrent callers.
	if !mode.markers() && slices.ContainsFunc(reqs, r.deny.remembers) {
		cs, errs := r.sendParts(ctx, reqs, lay, parts, decideMode{peek: true})
		out, all, err := answers(cs, errs, parts, len(reqs))
		if err != nil {
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", err)
		}
		if !all {
			return deniedSet(out), nil
		}
		// The denial ran out meanwhile: decide the set after all.
	}

	// The part most likely to deny first, alone; the others only when it
	// admits, all at once, each through its primary's round trips like
	// any decision. When it denies, the others are judged without a debit
	// (for their answers): nothing is debited to be given back.
	sent := int64(0)
	if r.deny != nil {
		sent = r.deny.now()
	}
	first := r.levels.riskiest(reqs, parts)
	cs, errs := make([]*call, len(parts)), make([]error, len(parts))
	c0, e0 := r.sendParts(ctx, reqs, lay, parts[first:first+1], mode)
	cs[first], errs[first] = c0[0], e0[0]
	if e0[0] != nil {
		return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", e0[0])
	}
	denied := !cs[first].decisions[0].Allowed
	restMode := mode
	if denied {
		restMode = decideMode{peek: true}
	}
	rest := make([][]int, 0, len(parts)-1)
	for j, part := range parts {
		if j != first {
			rest = append(rest, part)
		}
	}
	crest, erest := r.sendParts(ctx, reqs, lay, rest, restMode)
	for j, k := 0, 0; j < len(parts); j++ {
		if j != first {
			cs[j], errs[j] = crest[k], erest[k]
			k++
		}
	}
	for j, part := range parts {
		if errs[j] == nil {
			for k, i := range part {
				r.levels.note(reqs[i], cs[j].decisions[k])
			}
		}
	}
	if !mode.markers() {
		r.rememberDenials(reqs, cs, errs, parts, sent)
	}
	out, all, failed := answers(cs, errs, parts, len(reqs))
	if denied {
		return deniedSet(out), nil // a look that failed only leaves its answers out
	}
	if all {
		return out, nil
	}
	// Give back what the parts that admitted debited.
	var debited []*call
	var debitedParts [][]int
	for j, part := range parts {
		if errs[j] == nil && cs[j].debited() {
			debited, debitedParts = append(debited, cs[j]), append(debitedParts, part)
		}
	}
	if err := r.refund(ctx, reqs, lay.keys[:len(reqs)], debited, debitedParts); failed == nil && err != nil {
		failed = err
	}
	if failed != nil {
		return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", failed)
	}
	return deniedSet(out), nil
}

// sendParts sends one decide call in mode for each part of reqs (laid out
// as lay), all at once, and returns the calls and their errors once every
// one is answered or abandoned (its error then is ctx's).
func (r *Redis) sendParts(ctx context.Context, reqs []tollgate.Request, lay layout, parts [][]int, mode decideMode) ([]*call, []error) {
	cs := make([]*call, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for j, part := range parts {
		sub := make([]tollgate.Request, len(part))
		for k, i := range part {
			sub[k] = reqs[i]
		}
		// The call's own array holds the keys of a part of one request.
		c := calls.Get().(*call)
		keys := partKeys(c.keyBuf[:0], lay, part, len(reqs), mode.markers())
		c.fill(ctx, sub, keys, mode)
		cs[j] = c
		wg.Go(func() {
			if errs[j] = r.send(ctx, cs[j]); errs[j] == nil {
				errs[j] = cs[j].err
			}
		})
	}
	wg.Wait()
	return cs, errs
}

// partKeys appends to dst the KEYS of a decide call of the requests part
// names, of a set of n laid out as lay, with or without their markers:
// their state keys, then their markers.
func partKeys(dst []string, lay layout, part []int, n int, markers bool) []string {
	nkeys := len(part)
	if markers {
		nkeys *= 2
	}
	keys := slices.Grow(dst, nkeys)
	for _, i := range part {
		keys = append(keys, lay.keys[i])
	}
	if markers {
		for _, i := range part {
			keys = append(keys, lay.keys[n+i])
		}
	}
	return keys
}

// answers collects the n decisions of the parts' calls, reporting whether
// every one admitted, and the last error of a part that failed.
func answers(cs []*call, errs []error, parts [][]int, n int) (out []tollgate.Decision, all bool, failed error) {
	out, all = make([]tollgate.Decision, n), true
	for j, part := range parts {
		if errs[j] != nil {
			failed, all = errs[j], false
			continue
		}
		for k, i := range part {
			out[i] = cs[j].decisions[k]
			all = all && out[i].Allowed
		}
	}
	return out, all, failed
}

// deniedSet turns the decisions of a set's parts, of which one denied, into
// the set's: every request denied, those their part admitted with no wait.
func deniedSet(out []tollgate.Decision) []tollgate.Decision {
	for i := range out {
		out[i].Allowed, out[i].Replayed = false, false
	}
	return out
}

// rememberDenials gives the deny cache the denials of a set's requests
// whose Key and algorithm appear once in the set (one that shares its
// state with an earlier request was judged after that one's debit, which
// Allow would not see), sent at sent.
func (r *Redis) rememberDenials(reqs []tollgate.Request, cs []*call, errs []error, parts [][]int, sent int64) {
	if r.deny == nil {
		return
	}
	shared := func(i int) bool {
		for o := range reqs {
			if o != i && reqs[o].Key == reqs[i].Key && reqs[o].Limit.Algorithm == reqs[i].Limit.Algorithm {
				return true
			}
		}
		return false
	}
	for j, part := range parts {
		if errs[j] != nil {
			continue
		}
		for k, i := range part {
			if d := cs[j].decisions[k]; !d.Allowed && d.RetryAfter > 0 && !shared(i) {
				tk := ticket{dc: r.deny, key: r.deny.key(reqs[i].Key, reqs[i].Limit.Algorithm), limit: reqs[i].Limit, cost: reqs[i].Cost, sent: sent}
				tk.record(d, true)
			}
		}
	}
}
