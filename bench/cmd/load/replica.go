package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// replicaSection measures what a replica makes the Redis store pay: the
// same decisions on the measured Redis (no replica: nothing to fail over
// to) and on a second redis-server with a replica of its own attached
// (exact failovers: lineage, journal and gate), alternated, -reps times,
// at each -callers, on -identities random identities. A third subject on
// the replicated server has the failover machinery forced off
// (replicaFastOption), which separates what the replica costs Redis
// (replication) from what exactness costs. Each row's ratio is to the
// subject of the same algorithm on the server without a replica, within a
// repetition; Redis CPU is the primary's, and a note gives the replica's.
func (m *measurer) replicaSection(ctx context.Context) ([]row, []string, error) {
	srv, err := bench.StartRedis()
	if err != nil {
		return nil, nil, fmt.Errorf("replica: %w", err)
	}
	defer srv.Close()
	rm := &measurer{cfg: m.cfg, opts: srv.Options()}
	rm.admin = redis.NewClient(cloneOptions(rm.opts))
	defer rm.admin.Close()
	replica, err := rm.startReplica(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("replica: %w", err)
	}
	defer replica.Close()
	rc := redis.NewClient(replica.Options())
	defer rc.Close()

	ids := make([]string, m.cfg.identities)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	on := func(mm *measurer) func() redis.UniversalClient {
		return func() redis.UniversalClient { return redis.NewClient(cloneOptions(mm.opts)) }
	}
	var rows []row
	var notes []string
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		for _, id := range []bool{false, true} {
			suffix := ""
			if id {
				suffix = " +request id"
			}
			name := "tollgate " + alg.String() + suffix
			subjects := m.filter([]subject{
				storeSubject(name+", no replica", alg, id, true, on(m)),
				storeSubject(name+", replica (exact)", alg, id, false, on(rm)),
				storeSubject(name+", replica, failover machinery off", alg, id, false, on(rm), replicaFastOption()...),
			})
			if len(subjects) < 2 || !subjects[0].reference {
				continue
			}
			for _, callers := range m.cfg.callers {
				var replicaCPU []float64
				r, err := m.compare(ctx, "replica", "random", callers, subjects, func(s subject) (*sample, error) {
					mm := rm
					if s.reference {
						mm = m
					}
					d, release, err := s.make(mm, storeLimit)
					if err != nil {
						return nil, err
					}
					defer release()
					before, err := bench.ServerCPU(ctx, rc)
					if err != nil {
						return nil, err
					}
					sm, err := mm.cell(ctx, d, callers, ids, s.requestID)
					if err != nil {
						return nil, err
					}
					after, err := bench.ServerCPU(ctx, rc)
					if err == nil && !s.reference && sm.ops > 0 {
						replicaCPU = append(replicaCPU, float64((after-before).Microseconds())/float64(sm.ops))
					}
					return sm, err
				})
				if err != nil {
					return nil, nil, err
				}
				rows = append(rows, r...)
				notes = append(notes, fmt.Sprintf("replica, %s, %d callers: the replica's own CPU %.1f µs per decision (median over its cells)", name, callers, median(replicaCPU)))
				fmt.Fprintf(os.Stderr, "load: replica %s %d callers done\n", name, callers)
			}
		}
	}
	return rows, notes, nil
}

// storeSubject is tollgate's Redis store with the deny cache, on a client
// newClient makes, with opts; reference makes it the ratios' denominator.
func storeSubject(name string, alg tollgate.Algorithm, requestID, reference bool, newClient func() redis.UniversalClient, opts ...store.RedisOption) subject {
	return subject{name: name, reference: reference, requestID: requestID, make: func(_ *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := newClient()
		st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix()), store.WithDenyCache(store.DefaultDenyCacheSize)}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		return bench.Tollgate{Store: st, Limit: limit(alg)}, func() { closeStore(st); _ = c.Close() }, nil
	}}
}

// replicaFastOption turns the failover machinery off: no lineage, no
// journal, no gate, whatever the server's replicas.
func replicaFastOption() []store.RedisOption {
	return []store.RedisOption{store.WithJournal(0)}
}
