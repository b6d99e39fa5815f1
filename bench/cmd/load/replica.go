package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// replicaSection measures what a replica makes the Redis store pay: the
// same decisions on the measured Redis (no replica: nothing to fail over
// to) and on a second redis-server with a replica of its own attached
// (exact failovers: lineage, journal and gate), alternated, -reps times,
// at each -callers, on -identities random identities, each beside
// redis_rate on its own server. A third subject on the replicated server
// has the failover machinery forced off (replicaFastOption), which
// separates what the replica costs (replication, and on one machine the
// replica's own CPU) from what exactness costs. Each row's ratio is to
// redis_rate on its server, within a repetition; Redis CPU is the
// primary's. The notes give the replica's own CPU, and the exact and
// machinery-off rows over the row without a replica, per repetition.
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
	const (
		anchorAlone      = "redis_rate, no replica"
		anchorReplicated = "redis_rate, replica"
	)
	replicated := map[string]bool{anchorReplicated: true}
	var rows []row
	var notes []string
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
		for _, id := range []bool{false, true} {
			suffix := ""
			if id {
				suffix = " +request id"
			}
			name := "tollgate " + alg.String() + suffix
			alone, exact, off := name+", no replica", name+", replica (exact)", name+", replica, failover machinery off"
			replicated[exact], replicated[off] = true, true
			subjects := m.filter([]subject{
				redisRateOn(anchorAlone, true, "", on(m)),
				redisRateOn(anchorReplicated, false, anchorAlone, on(rm)),
				storeSubject(alone, alg, id, anchorAlone, on(m)),
				storeSubject(exact, alg, id, anchorReplicated, on(rm)),
				storeSubject(off, alg, id, anchorReplicated, on(rm), replicaFastOption()...),
			})
			if len(subjects) < 3 {
				continue
			}
			for _, callers := range m.cfg.callers {
				var replicaCPU []float64
				r, err := m.compare(ctx, "replica", "random", callers, subjects, func(s subject) (*sample, error) {
					mm := m
					if replicated[s.name] {
						mm = rm
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
					if err == nil && replicated[s.name] && sm.ops > 0 {
						replicaCPU = append(replicaCPU, float64((after-before).Microseconds())/float64(sm.ops))
					}
					return sm, err
				})
				if err != nil {
					return nil, nil, err
				}
				rows = append(rows, r...)
				notes = append(notes, fmt.Sprintf("replica, %s, %d callers: the replica's own CPU %.1f µs per decision (median over the replicated server's cells); %s",
					name, callers, median(replicaCPU), overRows(r, alone, exact, off)))
				fmt.Fprintf(os.Stderr, "load: replica %s %d callers done\n", name, callers)
			}
		}
	}
	return rows, notes, nil
}

// overRows says, for each of the rows named over (in rows), its decisions/s
// and Redis CPU over the row named base's, per repetition: median (range).
func overRows(rows []row, base string, over ...string) string {
	find := func(name string) *row {
		for i := range rows {
			if rows[i].subject == name {
				return &rows[i]
			}
		}
		return nil
	}
	b := find(base)
	out := ""
	for _, name := range over {
		r := find(name)
		if b == nil || r == nil || len(r.perRep) != len(b.perRep) {
			continue
		}
		var rates, cpus []float64
		for i := range r.perRep {
			rates = append(rates, r.perRep[i]/b.perRep[i])
			if b.cpuPerRep[i] > 0 {
				cpus = append(cpus, r.cpuPerRep[i]/b.cpuPerRep[i])
			}
		}
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("%s over %s: decisions/s %.2f× (%.2f–%.2f), Redis CPU %.2f× (%.2f–%.2f)",
			name, base, median(rates), slices.Min(rates), slices.Max(rates), median(cpus), slices.Min(cpus), slices.Max(cpus))
	}
	return out
}

// redisRateOn is redis_rate on a client newClient makes, its ratio taken
// to anchor (the reference when reference is set).
func redisRateOn(name string, reference bool, anchor string, newClient func() redis.UniversalClient) subject {
	return subject{name: name, reference: reference, anchor: anchor, make: func(_ *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := newClient()
		return prefixed{bench.RedisRate{Limiter: redis_rate.NewLimiter(c), Limit: bench.RedisRateLimit(limit(tollgate.GCRA))}, prefix()}, func() { _ = c.Close() }, nil
	}}
}

// storeSubject is tollgate's Redis store with the deny cache, on a client
// newClient makes, with opts, its ratio taken to anchor.
func storeSubject(name string, alg tollgate.Algorithm, requestID bool, anchor string, newClient func() redis.UniversalClient, opts ...store.RedisOption) subject {
	return subject{name: name, anchor: anchor, requestID: requestID, make: func(_ *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := newClient()
		st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix()), store.WithDenyCache(4096)}, opts...)...)
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
