package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// refundRecordTTL is how long a refund's settle records live: longer than
// any copy of that refund can come.
const refundRecordTTL = time.Minute

// refundTimeout bounds a refund that runs after its caller left.
const refundTimeout = 2 * time.Second

// refund gives back the debits of the decide calls cs, whose entries are
// reqs[parts[j]] (their state keys states[parts[j]]), with one settle
// script call each (lua/doc.go), in one pipeline: each entry is settled
// at a final cost of 0 against the admission its decide call answered,
// the rule every give-back follows.
// The settlements are recorded under one random id, so a copy of the
// refund that runs again gives back nothing more; the decide calls'
// request-id markers are deleted in the same call (settleRefund), so the
// denied set leaves no trace. It runs even when ctx is done: a debit left
// behind would deny later callers. The deny cache forgets the refunded
// identities.
func (r *Redis) refund(ctx context.Context, reqs []tollgate.Request, states []string, cs []*call, parts [][]int) error {
	if len(cs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	ps := r.keys.refundParts(reqs, states, cs, parts, newRefundID())
	out := make([]tollgate.Decision, len(reqs))
	err := r.settleParts(ctx, ps, parts, out)
	if r.deny != nil {
		for _, part := range parts {
			for _, i := range part {
				r.deny.forget(r.deny.key(reqs[i].Key, reqs[i].Limit.Algorithm))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("refund: %w", err)
	}
	return nil
}

// refundParts lays out the settle parts that give back the debits of the
// decide calls cs (see refund), recorded under id.
func (k *keySpace) refundParts(reqs []tollgate.Request, states []string, cs []*call, parts [][]int, id string) []*settlePart {
	admitted, final := make([]tollgate.Admission, len(reqs)), make([]int64, len(reqs))
	ps := make([]*settlePart, len(cs))
	for j, c := range cs {
		for k, i := range parts[j] {
			admitted[i] = c.decisions[k].Admission()
		}
		rec := settleRecords{mode: settleRecord, ttlMs: refundRecordTTL.Milliseconds(), id: id}
		if c.mode.markers() {
			rec.mode, rec.markers = settleRefund, c.keys[c.entries:2*c.entries]
		}
		ps[j] = k.settlePart(reqs, states, admitted, final, parts[j], rec)
	}
	return ps
}

// newRefundID returns a random id for one refund's settle records, unique
// for the life of its keys.
func newRefundID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
