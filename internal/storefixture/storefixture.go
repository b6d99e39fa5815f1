// Package storefixture builds the stores of package store for tests: an
// option a constructor rejects fails the test at once, so a test reads as
// the store it asks for.
package storefixture

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/store"
)

// Memory is store.NewMemory for a test: an option it rejects fails tb.
func Memory(tb testing.TB, opts ...store.MemoryOption) *store.Memory {
	tb.Helper()
	m, err := store.NewMemory(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Redis is store.NewRedis for a test: an option it rejects fails tb. The
// store is closed (its failover journal's goroutine stopped) when the test
// ends.
func Redis(tb testing.TB, c redis.UniversalClient, opts ...store.RedisOption) *store.Redis {
	tb.Helper()
	st, err := store.NewRedis(c, opts...)
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
