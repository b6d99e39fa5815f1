package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newMemory is NewMemory for a test: an option it rejects fails the test.
func newMemory(tb testing.TB, opts ...MemoryOption) *Memory {
	tb.Helper()
	m, err := NewMemory(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// newRedis is NewRedis for a test: an option it rejects fails the test. The
// store is closed (its failover journal's goroutine stopped) when the test
// ends.
func newRedis(tb testing.TB, c redis.UniversalClient, opts ...RedisOption) *Redis {
	tb.Helper()
	st, err := NewRedis(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.Close(ctx); err != nil {
			tb.Errorf("closing the Redis store: %v", err)
		}
	})
	return st
}
