package store

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
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
			st := NewRedis(c, WithPrefix(redistest.KeyPrefix(b)))
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
