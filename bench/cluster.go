package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of primaries only, started for a measurement.
type Cluster struct {
	// Nodes are its primaries, in the order of the slot ranges they serve.
	Nodes []*Server
}

// StartCluster starts n redis-servers in cluster mode (StartRedis), gives
// node i the i-th of n equal ranges of the slot space, as redis-cli
// --cluster create does, joins them, and returns once every node reports
// the cluster ok. Close stops every node.
func StartCluster(n int) (*Cluster, error) {
	cl := &Cluster{}
	for range n {
		s, err := StartRedis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			cl.Close()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, s)
	}
	ctx := context.Background()
	for i, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		lo, hi := i*16384/n, (i+1)*16384/n-1
		err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		for _, o := range cl.Nodes[:i] {
			if err == nil {
				host, port, _ := net.SplitHostPort(o.Addr)
				err = c.ClusterMeet(ctx, host, port).Err()
			}
		}
		_ = c.Close()
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("forming the cluster on %s: %w", s.Addr, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				cl.Close()
				return nil, fmt.Errorf("cluster not ok on %s within 30s: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return cl, nil
}

// Options returns ClusterClient options for the cluster as the measurements
// use them: go-redis defaults, context deadlines honoured on the socket.
func (cl *Cluster) Options() *redis.ClusterOptions {
	var addrs []string
	for _, s := range cl.Nodes {
		addrs = append(addrs, s.Addr)
	}
	return &redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}
}

// Close stops every node.
func (cl *Cluster) Close() {
	for _, s := range cl.Nodes {
		s.Close()
	}
}

// StartClusterWithReplicas is StartCluster with a replica attached to each
// primary (CLUSTER REPLICATE), returned in Replicas in the primaries'
// order, once every replica's link is up.
func StartClusterWithReplicas(n int) (*Cluster, []*Server, error) {
	cl, err := StartCluster(n)
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	var replicas []*Server
	fail := func(err error) (*Cluster, []*Server, error) {
		for _, r := range replicas {
			r.Close()
		}
		cl.Close()
		return nil, nil, err
	}
	for _, p := range cl.Nodes {
		r, err := StartRedis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			return fail(err)
		}
		replicas = append(replicas, r)
		pc, rc := redis.NewClient(p.Options()), redis.NewClient(r.Options())
		id, err := pc.ClusterMyID(ctx).Result()
		host, port, _ := net.SplitHostPort(p.Addr)
		if err == nil {
			err = rc.ClusterMeet(ctx, host, port).Err()
		}
		deadline := time.Now().Add(30 * time.Second)
		for err == nil {
			// The replica must know the primary before it can follow it.
			if err = rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err == nil {
				break
			}
			if time.Now().After(deadline) {
				break
			}
			err = nil
			time.Sleep(50 * time.Millisecond)
		}
		for err == nil {
			info, _ := rc.Info(ctx, "replication").Result()
			if strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				err = fmt.Errorf("the replica %s of %s did not sync", r.Addr, p.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = pc.Close(), rc.Close()
		if err != nil {
			return fail(fmt.Errorf("attaching a replica to %s: %w", p.Addr, err))
		}
	}
	return cl, replicas, nil
}
