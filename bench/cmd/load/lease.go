package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/lease"
	"github.com/tollgate/tollgate/store"
)

// leaseReplicas is how many replicas (each a store over its own go-redis
// client, and with the tier its own lease.Store) share the hot tenant in
// the lease cells.
const leaseReplicas = 4

// leaseCallers is the concurrency of the lease cells, spread over the
// replicas.
const leaseCallers = 64

// leaseLimit is the hot tenant's quota in the lease cells: 1M per second
// with a burst of 100M, so that no cell of a few seconds exhausts it and
// every decision measured is an admission (a tenant under its quota, the
// case the tier is for).
func leaseLimit(tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 100_000_000}
}

// replicated decides on one of its replicas, picked at random per decision.
type replicated []bench.Decider

func (r replicated) Decide(ctx context.Context, identity, requestID string) (bool, error) {
	return r[rand.IntN(len(r))].Decide(ctx, identity, requestID)
}

// leaseSubject is leaseReplicas Redis stores sharing one prefix, each
// behind a lease.Store when tier is set.
func leaseSubject(name string, tier, reference bool, opts ...lease.Option) subject {
	return subject{name: name, reference: reference, make: func(m *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		p := prefix()
		var clients []*redis.Client
		release := func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}
		var r replicated
		for range leaseReplicas {
			c := redis.NewClient(cloneOptions(m.opts))
			clients = append(clients, c)
			rs, err := store.NewRedis(c, store.WithPrefix(p))
			if err != nil {
				release()
				return nil, nil, err
			}
			var st tollgate.Store = rs
			if tier {
				t, err := lease.New(st, opts...)
				if err != nil {
					release()
					return nil, nil, err
				}
				st = t
			}
			r = append(r, bench.Tollgate{Store: st, Limit: limit(tollgate.TokenBucket)})
		}
		return r, release, nil
	}}
}

// leaseSection measures one hot tenant decided by leaseReplicas replicas
// from leaseCallers goroutines, with and without the local tier (package
// lease, default options), alternating -reps times: decisions per second
// and Redis script calls per decision (also returned as a line for below
// the table, with more digits than its column has).
func (m *measurer) leaseSection(ctx context.Context) ([]row, []string, error) {
	subjects := []subject{
		leaseSubject(fmt.Sprintf("tollgate token_bucket, %d replicas", leaseReplicas), false, true),
		leaseSubject(fmt.Sprintf("tollgate token_bucket + lease tier, %d replicas", leaseReplicas), true, false),
	}
	rows, err := m.compare(ctx, "lease", "hot", leaseCallers, subjects, func(s subject) (*sample, error) {
		d, release, err := s.make(m, leaseLimit)
		if err != nil {
			return nil, err
		}
		defer release()
		return m.cell(ctx, d, leaseCallers, []string{"hot-tenant"}, false)
	})
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "load: lease done")
	note := "lease: Redis script calls per decision for the hot tenant (medians):"
	for _, r := range rows {
		note += fmt.Sprintf(" %s %.5f;", r.subject, r.scriptsPerOp)
	}
	return rows, []string{note}, nil
}
