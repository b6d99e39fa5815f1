package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/lua"
)

// normalizeAll checks a set for AllowAll and returns a normalized copy.
// Every error wraps tollgate.ErrInvalidRequest.
func normalizeAll(reqs []tollgate.Request) ([]tollgate.Request, error) {
	switch {
	case len(reqs) == 0:
		return nil, fmt.Errorf("%w: AllowAll needs at least one request", tollgate.ErrInvalidRequest)
	case len(reqs) > tollgate.MaxAllowAll:
		return nil, fmt.Errorf("%w: AllowAll takes at most %d requests, got %d", tollgate.ErrInvalidRequest, tollgate.MaxAllowAll, len(reqs))
	}
	out := make([]tollgate.Request, len(reqs))
	for i, req := range reqs {
		if req.RequestID != reqs[0].RequestID {
			return nil, fmt.Errorf("%w: AllowAll request %d has request id %q, request 0 has %q: a set carries one id", tollgate.ErrInvalidRequest, i, req.RequestID, reqs[0].RequestID)
		}
		n, err := req.Normalized()
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// AllowAll decides reqs all or nothing (see tollgate.Store).
//
// On a single node or through Sentinel the whole set is one script call,
// atomic like a single decision. On a ClusterClient the set is split by
// Cluster slot (the keys of one call must share one), one call per slot,
// sent at once; when one slot denies, the debits of the slots that
// admitted are given back by a refund script before AllowAll returns (see
// docs/store.md for the window in which that debit may deny a concurrent
// caller). On any other client (a Ring) the set is split by hash tag, as
// the client shards by it. An error from Redis leaves the set's outcome
// unknown for the slots whose reply was lost; the debits known are given
// back.
func (r *Redis) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	reqs, err := normalizeAll(reqs)
	if err != nil {
		return nil, err
	}
	mode := r.modeFor(reqs[0].RequestID)
	ttl := r.replays.ttlMsFor(setReplayTTL(reqs))
	parts := r.partition(reqs)
	if len(parts) == 1 {
		out := make([]tollgate.Decision, len(reqs))
		c := r.newCall(ctx, reqs, mode, reqs[0].RequestID, ttl)
		if err := r.send(ctx, c); err != nil {
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", err)
		}
		if c.err != nil {
			r.refreshRouting(c.err)
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", c.err)
		}
		for i := range out {
			out[i] = decisionOf(c.reply[5*i:])
		}
		calls.Put(c)
		return out, nil
	}

	// A set with a member whose denial is remembered is denied: it is
	// judged without a debit (peek mode), so that its other parts are not
	// debited and given back, which could deny concurrent callers.
	if mode == modeNoID && slices.ContainsFunc(reqs, r.deny.remembers) {
		cs, errs := r.sendParts(ctx, reqs, parts, modePeek, ttl)
		out, all, err := answers(cs, errs, parts, len(reqs))
		if err != nil {
			return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", err)
		}
		if !all {
			return deniedSet(out), nil
		}
		// The denial ran out meanwhile: decide the set after all.
	}

	// One call per part, all at once; each goes through its primary's
	// round trips like any decision.
	sent := int64(0)
	if r.deny != nil {
		sent = r.deny.now()
	}
	cs, errs := r.sendParts(ctx, reqs, parts, mode, ttl)
	if mode == modeNoID {
		r.rememberDenials(reqs, cs, errs, parts, sent)
	}
	out, all, failed := answers(cs, errs, parts, len(reqs))
	if all {
		return out, nil
	}
	// Give back what the parts that admitted debited: every part answered
	// that did not replay an earlier admission.
	var debited []*call
	var debitedParts [][]int
	for j, part := range parts {
		if errs[j] == nil && cs[j].reply[0] == 1 && cs[j].reply[4] == 0 {
			debited, debitedParts = append(debited, cs[j]), append(debitedParts, part)
		}
	}
	refundErr := r.refund(ctx, reqs, debited, debitedParts, mode > 0)
	if failed == nil && refundErr != nil {
		failed = refundErr
	}
	if failed != nil {
		return nil, fmt.Errorf("tollgate: redis store: AllowAll: %w", failed)
	}
	return deniedSet(out), nil
}

// deniedSet turns the decisions of a set's parts, of which one denied, into
// the set's: every request denied, those their part admitted with no wait.
func deniedSet(out []tollgate.Decision) []tollgate.Decision {
	for i := range out {
		out[i].Allowed, out[i].Replayed = false, false
	}
	return out
}

// sendParts sends one decide call in mode for each part of reqs, all at
// once, and returns the calls and their errors once every one is answered
// or abandoned (its error then is ctx's).
func (r *Redis) sendParts(ctx context.Context, reqs []tollgate.Request, parts [][]int, mode, ttl int64) ([]*call, []error) {
	cs := make([]*call, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for j, part := range parts {
		sub := make([]tollgate.Request, len(part))
		for k, i := range part {
			sub[k] = reqs[i]
		}
		cs[j] = r.newCall(ctx, sub, mode, reqs[0].RequestID, ttl)
		wg.Go(func() {
			if errs[j] = r.send(ctx, cs[j]); errs[j] == nil {
				errs[j] = cs[j].err
			}
			if errs[j] != nil {
				r.refreshRouting(errs[j])
			}
		})
	}
	wg.Wait()
	return cs, errs
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
			out[i] = decisionOf(cs[j].reply[5*k:])
			all = all && out[i].Allowed
		}
	}
	return out, all, failed
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
			if d := decisionOf(cs[j].reply[5*k:]); d.Allowed || d.RetryAfter <= 0 || shared(i) {
				continue
			}
			tk := ticket{dc: r.deny, key: r.deny.key(reqs[i].Key, reqs[i].Limit.Algorithm), limit: reqs[i].Limit, cost: reqs[i].Cost, sent: sent}
			tk.settle(decisionOf(cs[j].reply[5*k:]), true)
		}
	}
}

// partition groups the indexes of reqs into the parts one script call can
// decide, each in the set's order: one part on a single node, one per
// Cluster slot on a ClusterClient, one per hash tag on any other client.
func (r *Redis) partition(reqs []tollgate.Request) [][]int {
	_, single := r.client.(*redis.Client)
	if single || len(reqs) == 1 {
		all := make([]int, len(reqs))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var parts [][]int
	index := make(map[string]int, len(reqs))
	for i, req := range reqs {
		k := decisionKeys(r.prefix, req.Limit.Algorithm, req.Key, "")[0]
		part := hashTag(k)
		if r.cluster != nil {
			part = strconv.Itoa(slot(k))
		}
		j, ok := index[part]
		if !ok {
			j = len(parts)
			index[part] = j
			parts = append(parts, nil)
		}
		parts[j] = append(parts[j], i)
	}
	return parts
}

// refundNonceTTL is how long a refund's nonce key lives: longer than any
// retry of that refund can come.
const refundNonceTTL = time.Minute

// refundTimeout bounds a refund that runs after its caller left.
const refundTimeout = 2 * time.Second

// refund gives back the debits of the decide calls cs, whose groups are
// reqs[parts[j]], with one refund script call each (lua/doc.go), in one
// pipeline. A refund is idempotent (its nonce key is claimed with SET NX),
// so, unlike a decision, it may be re-sent after a lost reply. It runs
// even when ctx is done: a debit left behind would deny later callers.
// The deny cache forgets the refunded identities.
func (r *Redis) refund(ctx context.Context, reqs []tollgate.Request, cs []*call, parts [][]int, markers bool) error {
	if len(cs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	nonce := newNonce()
	refundSHA, refundText := lua.Hash(lua.Refund), lua.Source(lua.Refund)
	cmds := make([]*redis.Cmd, len(cs))
	args := make([][]any, len(cs))
	marks := int64(0)
	if markers {
		marks = 1
	}
	for j, c := range cs {
		n := c.groups
		keys := c.keys[:n]
		if markers {
			keys = c.keys[:2*n]
		}
		a := []any{"evalsha", refundSHA, len(keys) + 1}
		for _, k := range keys {
			a = append(a, k)
		}
		a = append(a, hashTagged(keys[0])+":n:"+nonce, marks, refundNonceTTL.Milliseconds(), c.reply[5*n])
		for k, i := range parts[j] {
			p := algo.ParamsOf(reqs[i])
			a = append(a, int64(reqs[i].Limit.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost, c.reply[5*k+1])
		}
		args[j] = a
	}
	run := func(eval bool, which []int) {
		pipe := r.client.Pipeline()
		for _, j := range which {
			a := args[j]
			if eval {
				a[0], a[1] = "eval", refundText
			}
			cmds[j] = redis.NewCmd(ctx, a...)
			cmds[j].SetFirstKeyPos(3)
			_ = pipe.Process(ctx, cmds[j])
		}
		_, _ = pipe.Exec(ctx)
	}
	all := make([]int, len(cs))
	for j := range all {
		all[j] = j
	}
	run(false, all)
	var missing []int
	for j, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, j)
		}
	}
	if len(missing) > 0 {
		run(true, missing)
	}
	var err error
	for j, part := range parts {
		if r.deny != nil {
			for _, i := range part {
				r.deny.forget(r.deny.key(reqs[i].Key, reqs[i].Limit.Algorithm))
			}
		}
		if e := cmds[j].Err(); e != nil {
			err = fmt.Errorf("refund: %w", e)
		}
	}
	return err
}

// hashTagged returns key up to and including its hash tag's closing brace:
// a name on that tag's slot.
func hashTagged(key string) string { return key[:strings.IndexByte(key, '}')+1] }

// newNonce returns a random name for one refund, unique for the life of
// its key.
func newNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Peek reports what Allow would answer for req now, without a debit and
// without reading or recording its RequestID: one decide script call in
// its read-only mode, which writes nothing.
func (r *Redis) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	req, err := req.Normalized()
	if err != nil {
		return tollgate.Decision{}, err
	}
	c := r.newCall(ctx, []tollgate.Request{req}, modePeek, "", 0)
	if err := r.send(ctx, c); err != nil {
		return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: peek: %w", err)
	}
	if c.err != nil {
		r.refreshRouting(c.err)
		return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: peek: %w", c.err)
	}
	d := decisionOf(c.reply)
	calls.Put(c)
	return d, nil
}

// Reset forgets req's Key under req's algorithm (a DEL of its state key):
// a full bucket or an empty window again. Request ids it admitted are still
// remembered. This store's deny cache forgets the identity too; another
// store's remembered denial of it runs out on its own (at most
// MaxDenyCacheTTL).
func (r *Redis) Reset(ctx context.Context, req tollgate.Request) error {
	req, err := req.Normalized()
	if err != nil {
		return err
	}
	if r.deny != nil {
		defer r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm))
	}
	k := decisionKeys(r.prefix, req.Limit.Algorithm, req.Key, "")[0]
	if err := r.client.Del(ctx, k).Err(); err != nil {
		return fmt.Errorf("tollgate: redis store: reset: %w", err)
	}
	return nil
}
