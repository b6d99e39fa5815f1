package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/internal/redistest"
)

// BenchmarkRedisAllow measures one decision end to end on the shared single
// node: key building, the script call and the reply parsing.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Single(b)
	for _, bc := range []struct {
		name  string
		opts  *redis.Options
		reqID bool
	}{
		{"plain", &redis.Options{Addr: srv.Addr()}, false},
		{"request-id", &redis.Options{Addr: srv.Addr()}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := redis.NewClient(bc.opts)
			defer c.Close()
			st := newRedis(b, c, WithPrefix(redistest.KeyPrefix(b)))
			ctx := context.Background()
			req := tollgate.Request{Key: "bench:user-42", Limit: tollgate.PerSecond(1_000_000)}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if bc.reqID {
					req.RequestID = "req-" + strconv.Itoa(i)
					i++
				}
				if _, err := st.Allow(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedisLimitsPerCall compares, in one run on a private node, the
// Redis time of a call under one limit (Allow of a plain key) with a call
// under two limits of one identity (AllowAll of two part keys, one script
// call), a settled call (its decision and its settlement) and an in-flight
// seat taken and given back, over 1000 identities: redis-µs/call is INFO
// commandstats' usec per EVALSHA (the script's own time), redis-µs/op the
// scripts' time per operation, redis-cpu-µs/op the main thread's CPU per
// operation, its network reads and writes included.
func BenchmarkRedisLimitsPerCall(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	st := newRedis(b, c, WithBatching(0, 0), WithDenyCache(0))
	ctx := context.Background()
	// Quotas no call exhausts, refilling slower than each identity is
	// called again, so that every call reads and writes a live state.
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1_000_000, Period: 30 * 24 * time.Hour}
	other := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 2_000_000, Period: 60 * 24 * time.Hour}
	number := func(section, field string) float64 {
		f, _ := strconv.ParseFloat(srv.Info(b, section, field), 64)
		return f
	}
	cpu := func() float64 {
		return number("cpu", "used_cpu_user_main_thread") + number("cpu", "used_cpu_sys_main_thread")
	}
	evalsha := func(field string) float64 {
		for _, kv := range strings.Split(srv.Info(b, "commandstats", "cmdstat_evalsha"), ",") {
			if k, v, _ := strings.Cut(kv, "="); k == field {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	for _, bc := range []struct {
		name string
		do   func(id string) error
	}{
		{"one-limit", func(id string) error {
			_, err := st.Allow(ctx, tollgate.Request{Key: id, Limit: limit})
			return err
		}},
		{"two-limits-one-identity", func(id string) error {
			_, err := st.AllowAll(ctx, []tollgate.Request{{Key: partkey.Join(id, "s"), Limit: limit}, {Key: partkey.Join(id, "h"), Limit: other}})
			return err
		}},
		{"settled", func(id string) error {
			// As the interceptor settles: a reservation of 500, a final
			// cost of 300, under a request id made for the settlement.
			req := tollgate.Request{Key: id, Limit: limit, Cost: 500}
			d, err := st.Allow(ctx, req)
			if err != nil {
				return err
			}
			req.RequestID = "settle-" + id + "-" + strconv.FormatInt(d.At.UnixNano(), 36)
			_, err = st.Settle(ctx, req, d.Admission(), 300)
			return err
		}},
		{"seat-acquire-release", func(id string) error {
			s := tollgate.Seat{Key: id, Max: 20, ID: "call-" + id, TTL: 30 * time.Second}
			if _, err := st.AcquireSeat(ctx, s); err != nil {
				return err
			}
			return st.ReleaseSeat(ctx, s)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := cpu()
			i := 0
			for b.Loop() {
				if err := bc.do("bench-" + strconv.Itoa(i%1000)); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(evalsha("usec_per_call"), "redis-µs/call")
			b.ReportMetric(evalsha("usec")/float64(i), "redis-µs/op")
			b.ReportMetric((cpu()-cpu0)*1e6/float64(i), "redis-cpu-µs/op")
		})
	}
}

// BenchmarkClusterSetAcrossSlots measures, one caller at a time on the
// shared Cluster, what deciding the riskiest part first costs in latency:
// an AllowAll of two identities on two slots (two round trips in a row)
// beside one Allow (one round trip) and two Allows sent at once (how every
// part of a set used to be decided).
func BenchmarkClusterSetAcrossSlots(b *testing.B) {
	c := redistest.SharedCluster(b).Client(b)
	st := newRedis(b, c, WithPrefix(redistest.KeyPrefix(b)))
	ctx := context.Background()
	limit := tollgate.PerSecond(1_000_000)
	tenant := tollgate.Request{Key: "tenant-a", Limit: limit}
	global := tollgate.Request{Key: "global", Limit: limit}
	if slot(decisionKeys(st.keyPrefix(tenant.Key), 0, tenant.Key, "")[0]) == slot(decisionKeys(st.keyPrefix(global.Key), 0, global.Key, "")[0]) {
		b.Fatal("the two identities share a slot")
	}
	run := func(b *testing.B, op func() error) {
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("one Allow", func(b *testing.B) {
		run(b, func() error { _, err := st.Allow(ctx, tenant); return err })
	})
	b.Run("two Allows at once", func(b *testing.B) {
		run(b, func() error {
			errs := make(chan error, 1)
			go func() { _, err := st.Allow(ctx, global); errs <- err }()
			_, err := st.Allow(ctx, tenant)
			return errors.Join(err, <-errs)
		})
	})
	b.Run("AllowAll of two slots", func(b *testing.B) {
		run(b, func() error { _, err := st.AllowAll(ctx, []tollgate.Request{tenant, global}); return err })
	})
}
