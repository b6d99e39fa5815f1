package store

import (
	"context"
	"slices"
	"sync"

	"github.com/tollgate/tollgate"
)

// allowParts decides reqs, laid out as lay in several parts, all or nothing
// in mode (see AllowAll), in the order the steps below run: a set with a
// remembered denial is only judged; otherwise the riskiest part goes
// first, then the rest; what the parts answered is noted (levels, the deny
// cache) and collected; when the set is denied after some parts debited,
// their debits are given back (refund).
func (r *Redis) allowParts(ctx context.Context, reqs []tollgate.Request, lay layout, mode decideMode) ([]tollgate.Decision, error) {
	// A set with a member whose denial is remembered is denied: it is
	// judged without a debit (peek mode), so that its other parts are not
	// debited and given back, which could deny concurrent callers.
	if !mode.markers() && slices.ContainsFunc(reqs, r.deny.remembers) {
		cs, errs := r.sendParts(ctx, reqs, lay, lay.parts, decideMode{peek: true})
		out, all, err := answers(cs, errs, lay.parts, len(reqs))
		if err != nil {
			return nil, err
		}
		if !all {
			return deniedSet(out), nil
		}
		// The denial ran out meanwhile: decide the set after all.
	}

	sent := int64(0)
	if r.deny != nil {
		sent = r.deny.now()
	}
	cs, errs, denied, err := r.riskiestFirst(ctx, reqs, lay, mode)
	if err != nil {
		return nil, err
	}
	for j, part := range lay.parts {
		if errs[j] == nil {
			for k, i := range part {
				r.levels.note(reqs[i], cs[j].decisions[k])
			}
		}
	}
	if !mode.markers() {
		r.rememberDenials(reqs, cs, errs, lay.parts, sent)
	}
	out, all, failed := answers(cs, errs, lay.parts, len(reqs))
	if denied {
		return deniedSet(out), nil // a look that failed only leaves its answers out
	}
	if all {
		return out, nil
	}
	// Give back what the parts that admitted debited.
	var debited []*call
	var debitedParts [][]int
	for j, part := range lay.parts {
		if errs[j] == nil && cs[j].debited() {
			debited, debitedParts = append(debited, cs[j]), append(debitedParts, part)
		}
	}
	if err := r.refund(ctx, reqs, lay.keys[:len(reqs)], debited, debitedParts); failed == nil && err != nil {
		failed = err
	}
	if failed != nil {
		return nil, failed
	}
	return deniedSet(out), nil
}

// riskiestFirst sends the part of reqs (laid out as lay) most likely to
// deny first, alone, in mode; then the others, all at once, each through
// its primary's round trips like any decision: in mode when the first
// admitted, otherwise judged without a debit (for their answers), so that
// nothing is debited to be given back. It returns each part's call and
// error, in lay.parts' order, and whether the first part denied; when the
// first part fails, only its error.
func (r *Redis) riskiestFirst(ctx context.Context, reqs []tollgate.Request, lay layout, mode decideMode) (cs []*call, errs []error, denied bool, err error) {
	parts := lay.parts
	first := r.levels.riskiest(reqs, parts)
	cs, errs = make([]*call, len(parts)), make([]error, len(parts))
	c0, e0 := r.sendParts(ctx, reqs, lay, parts[first:first+1], mode)
	cs[first], errs[first] = c0[0], e0[0]
	if e0[0] != nil {
		return nil, nil, false, e0[0]
	}
	denied = !cs[first].decisions[0].Allowed
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
	return cs, errs, denied, nil
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
		c.fill(ctx, sub, keys, r.keys.lineage.of(keys[0]), mode)
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
