package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/store"
)

// clusterPrimaries is the size of the cluster section's Cluster.
const clusterPrimaries = 3

// clusterTags are the WithClusterTags n of the tagged rows: one and
// two hash tags per primary; -variants adds four and sixteen.
var clusterTags = []int{clusterPrimaries, 2 * clusterPrimaries}

// clusterSection measures decisions on a 3-primary Cluster it starts (its
// own redis-servers, whatever -redis says): redis_rate, tollgate in its
// default layout and in the tagged layout (WithClusterTags), on random
// identities, with Redis figures summed over the primaries.
func (m *measurer) clusterSection(ctx context.Context) ([]row, error) {
	cl, err := bench.StartCluster(clusterPrimaries)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	cm := &measurer{cfg: m.cfg, admin: m.admin}
	for _, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		defer c.Close()
		cm.nodes = append(cm.nodes, c)
	}
	opts := cl.Options()
	newClient := func() *redis.ClusterClient {
		o := *opts
		return redis.NewClusterClient(&o)
	}
	subjects := []subject{{name: "redis_rate", reference: true, make: func(_ *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := newClient()
		return prefixed{bench.RedisRate{Limiter: redis_rate.NewLimiter(c), Limit: bench.RedisRateLimit(limit(tollgate.GCRA))}, prefix()}, func() { _ = c.Close() }, nil
	}}}
	tg := func(name string, alg tollgate.Algorithm, requestID bool, opts ...store.RedisOption) subject {
		return subject{name: name, requestID: requestID, make: func(_ *measurer, limit func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
			c := newClient()
			st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix())}, opts...)...)
			if err != nil {
				return nil, nil, err
			}
			return bench.Tollgate{Store: st, Limit: limit(alg)}, func() { _ = c.Close() }, nil
		}}
	}
	tags := clusterTags
	if m.cfg.variants {
		tags = append(tags, 4*clusterPrimaries, 16*clusterPrimaries)
	}
	for _, alg := range []tollgate.Algorithm{tollgate.GCRA, tollgate.TokenBucket} {
		for _, id := range []bool{false, true} {
			suffix := ""
			if id {
				suffix = " +request id"
			}
			subjects = append(subjects, tg("tollgate "+alg.String()+suffix, alg, id))
			for _, n := range tags {
				subjects = append(subjects, tg("tollgate "+alg.String()+" tagged ("+strconv.Itoa(n)+" tags)"+suffix, alg, id, store.WithClusterTags(n)))
			}
			if m.cfg.variants {
				subjects = append(subjects, tg("tollgate "+alg.String()+" tagged ("+strconv.Itoa(clusterPrimaries)+" tags), one round trip at a time"+suffix,
					alg, id, store.WithClusterTags(clusterPrimaries), store.WithBatching(128, 1)))
			}
		}
	}
	subjects = m.filter(subjects)
	random := make([]string, m.cfg.identities)
	for i := range random {
		random[i] = "user-" + strconv.Itoa(i)
	}
	var rows []row
	for _, callers := range m.cfg.callers {
		r, err := cm.compare(ctx, "cluster", "random", callers, subjects, func(s subject) (*sample, error) {
			d, release, err := s.make(cm, storeLimit)
			if err != nil {
				return nil, err
			}
			defer release()
			return cm.cell(ctx, d, callers, random, s.requestID)
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
		fmt.Fprintf(os.Stderr, "load: cluster random %d callers done\n", callers)
	}
	return rows, nil
}
