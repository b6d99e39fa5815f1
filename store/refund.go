package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

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
func (r *Redis) refund(ctx context.Context, reqs []tollgate.Request, cs []*call, parts [][]int) error {
	if len(cs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	nonce := newNonce()
	sc := make([]scriptCall, len(cs))
	for j, c := range cs {
		keys, markers := c.keys[:c.groups], int64(0)
		if c.mode.markers() {
			keys, markers = c.keys[:2*c.groups], 1
		}
		a := []any{nil, nil, len(keys) + 1}
		for _, k := range keys {
			a = append(a, k)
		}
		a = append(a, hashTagged(keys[0])+":n:"+nonce, markers, refundNonceTTL.Milliseconds(), c.now)
		for k, i := range parts[j] {
			p := algo.ParamsOf(reqs[i])
			a = append(a, int64(reqs[i].Limit.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost, c.decisions[k].Remaining)
		}
		sc[j] = scriptCall{script: refundScript, args: a}
	}
	err := r.exchange(ctx, sc)
	for j, part := range parts {
		if r.deny != nil {
			for _, i := range part {
				r.deny.forget(r.deny.key(reqs[i].Key, reqs[i].Limit.Algorithm))
			}
		}
		if err == nil {
			err = readRefund(sc[j].cmd)
		}
	}
	if err != nil {
		return fmt.Errorf("refund: %w", err)
	}
	return nil
}

// readRefund decodes a refund script call's reply (lua/doc.go): 1 when it
// gave back, 0 when a copy with its nonce already had; either is success.
func readRefund(cmd redis.Cmder) error {
	v, err := cmd.(anyCmd).Int64()
	if err == nil && v != 0 && v != 1 {
		err = errBadReply
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
