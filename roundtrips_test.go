package tollgate_test

// How many script calls a call costs Redis.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
)

// scriptCalls is how many EVALSHA and EVAL s has run since its statistics
// were last reset (INFO commandstats).
func scriptCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	n := int64(0)
	for _, cmd := range []string{"evalsha", "eval"} {
		v := s.Info(t, "commandstats", "cmdstat_"+cmd) // calls=N,usec=...
		if calls, ok := strings.CutPrefix(v, "calls="); ok {
			c, _ := strconv.ParseInt(calls[:strings.IndexByte(calls, ',')], 10, 64)
			n += c
		}
	}
	return n
}

// A rule with a rate, an in-flight bound and Settle costs Redis at most one
// script call before the handler (the seat and the debit together) and one
// after (the settlement and the release together): counted by Redis's
// commandstats over 200 sequential calls, on a single node, through
// Sentinel, and on a 3-node Cluster of the test's own (one identity's keys
// share a slot, so its admit and finish calls are whole there too).
func TestOneScriptCallBeforeAndOneAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		// client returns the client and the servers whose script calls count.
		client func(t *testing.T) (redis.UniversalClient, []*redistest.Server)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			srv := redistest.Start(t)
			return srv.Client(t), []*redistest.Server{srv}
		}},
		{"sentinel", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			srv := redistest.Start(t)
			sentinel := redistest.Sentinel(t, srv)
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel.Addr()}})
			t.Cleanup(func() { _ = c.Close() })
			return c, []*redistest.Server{srv}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			cl := redistest.NewCluster(t, 0)
			return cl.Client(t), cl.Nodes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, servers := tc.client(t)
			st := newRedis(t, client)
			r := rule(t, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 1_000_000, Period: 24 * time.Hour})
			r.Cost, r.Settle, r.InFlight.Max = 100, interceptor.SettleReported, 4
			l := limiter(t, st, interceptor.WithRules(r))
			c := serve(t, l, &echo.Server{Before: reporting}, nil)
			if _, _, err := say(costing("a", 7), c); err != nil {
				t.Fatal(err) // loads the scripts
			}
			if err := l.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, srv := range servers {
				if _, err := srv.Client(t).ConfigResetStat(context.Background()).Result(); err != nil {
					t.Fatal(err)
				}
			}
			const calls = 200
			for i := range calls {
				if _, _, err := say(costing("a", 7), c); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if err := l.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := int64(0)
			for _, srv := range servers {
				got += scriptCalls(t, srv)
			}
			if got > 2*calls {
				t.Fatalf("%d calls made %d script calls, want at most 2 per call", calls, got)
			}
			if got < calls+1 {
				t.Fatalf("%d calls made %d script calls: the count proves nothing", calls, got)
			}
			if n := counted24h(t, st, r, "a"); n != 7*(calls+1) {
				t.Fatalf("the window counted %d, want 7 × %d", n, calls+1)
			}
			t.Logf("%d calls, %d script calls (%.2f per call)", calls, got, float64(got)/calls)
		})
	}
}

// counted24h is what r's day window counted for who: used plus owed.
func counted24h(t *testing.T, st tollgate.Store, r interceptor.Rule, who string) int64 {
	q := peekOne(t, limiter(t, st, interceptor.WithRules(r)), r.Name, interceptor.Caller{Value: who}, 24*time.Hour)
	return r.Limits.List()[0].Rate - q.Available + q.Decision.Debt
}
