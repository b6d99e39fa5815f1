package store

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

// memRefused keeps the summaries of refused identities published to a
// Memory store (tollgate.RefusedStore), by rule and replica. Its zero
// value is ready.
type memRefused struct {
	mu    sync.Mutex
	rules map[string]*memRefusedRule
}

// memRefusedRule is one rule's summaries and when they expire (in the
// store's clock, as Unix microseconds).
type memRefusedRule struct {
	byReplica map[string][]byte
	expires   int64
}

// PublishRefused keeps summary as replica's for rule, for ttl after the
// last publication of any replica.
func (m *Memory) PublishRefused(ctx context.Context, rule, replica string, summary []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("tollgate: memory store: publish refused: the ttl %v is not positive", ttl)
	}
	now := m.clock().UnixMicro()
	mr := &m.refused
	mr.mu.Lock()
	defer mr.mu.Unlock()
	mr.sweep(now)
	if mr.rules == nil {
		mr.rules = make(map[string]*memRefusedRule)
	}
	r := mr.rules[rule]
	if r == nil {
		r = &memRefusedRule{byReplica: make(map[string][]byte)}
		mr.rules[rule] = r
	}
	r.byReplica[replica] = append([]byte(nil), summary...)
	r.expires = now + ttl.Microseconds()
	return nil
}

// RefusedSummaries returns the summaries of rule kept, by replica.
func (m *Memory) RefusedSummaries(ctx context.Context, rule string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mr := &m.refused
	mr.mu.Lock()
	defer mr.mu.Unlock()
	mr.sweep(m.clock().UnixMicro())
	out := map[string][]byte{}
	if r := mr.rules[rule]; r != nil {
		maps.Copy(out, r.byReplica)
	}
	return out, nil
}

// sweep forgets the rules whose summaries expired by now; there are as
// many as the rules of the replicas sharing the store.
func (mr *memRefused) sweep(now int64) {
	for name, r := range mr.rules {
		if r.expires <= now {
			delete(mr.rules, name)
		}
	}
}
