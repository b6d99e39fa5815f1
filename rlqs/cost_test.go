package rlqs_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// scriptCalls returns how many scripts the servers have run: EVALSHA and
// EVAL calls.
func scriptCalls(t testing.TB, servers ...*redistest.Server) int64 {
	t.Helper()
	n := int64(0)
	for _, srv := range servers {
		for _, cmd := range []string{"evalsha", "eval"} {
			n += callsIn(srv.Info(t, "commandstats", "cmdstat_"+cmd))
		}
	}
	return n
}

// clusterScriptCalls is scriptCalls on every primary of a Cluster.
func clusterScriptCalls(t testing.TB, cc *redis.ClusterClient) int64 {
	t.Helper()
	var mu sync.Mutex
	n := int64(0)
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		for line := range strings.Lines(info) {
			for _, cmd := range []string{"evalsha", "eval"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
					mu.Lock()
					n += callsIn(v)
					mu.Unlock()
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// callsIn reads calls=N from a commandstats value.
func callsIn(v string) int64 {
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	c, _ := strconv.ParseInt(calls, 10, 64)
	return c
}

// TestRedisCallsIndependentOfCallRate drives one Client at 100 and at
// 2,000 decisions a second for 2 seconds each: the quota server's Redis
// runs the same number of scripts at both rates, one per report (every
// 100ms) and per rebalance (every second), not one per decision.
func TestRedisCallsIndependentOfCallRate(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Single(t)
		callsAtTwoRates(t, newRedis(t, srv.Client(t), store.WithPrefix(redistest.KeyPrefix(t))), func() int64 { return scriptCalls(t, srv) })
	})
	t.Run("cluster", func(t *testing.T) {
		cc := redistest.SharedCluster(t).Client(t)
		callsAtTwoRates(t, newRedis(t, cc, store.WithPrefix(redistest.KeyPrefix(t))), func() int64 { return clusterScriptCalls(t, cc) })
	})
}

// callsAtTwoRates measures the scripts Redis runs (countScripts) for one
// Client's decisions at two rates, its quota server on st.
func callsAtTwoRates(t *testing.T, st tollgate.Store, countScripts func() int64) {
	conn := quotaServer(t, st, rls.QuotaOptions{})
	c := newClient(t, conn, rlqs.Options{ReportInterval: 100 * time.Millisecond})
	req := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100)}
	ctx := context.Background()
	if _, err := c.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	measure := func(rate int) (decisions, scripts int64) {
		before := countScripts()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		end := time.Now().Add(2 * time.Second)
		for time.Now().Before(end) {
			<-tick.C
			if _, err := c.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
			decisions++
		}
		return decisions, countScripts() - before
	}
	slowD, slow := measure(100)
	fastD, fast := measure(2000)
	t.Logf("Redis scripts in 2s: %d at %d decisions, %d at %d decisions", slow, slowD, fast, fastD)
	if fastD < 5*slowD {
		t.Fatalf("the fast run made %d decisions, the slow %d: the rates are not apart enough to prove anything", fastD, slowD)
	}
	// 20 reports and 2 rebalances in 2s; a busy machine drops a few
	// ticks.
	for _, n := range []int64{slow, fast} {
		if n < 10 || n > 30 {
			t.Errorf("%d scripts in 2s, want about 22: one per report and rebalance", n)
		}
	}
	if d := fast - slow; d > 8 || d < -8 {
		t.Errorf("%d scripts at the fast rate against %d at the slow one: the store's load follows the call rate", fast, slow)
	}
}
