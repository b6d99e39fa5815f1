package tollgate_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/store"
)

// newMemory is store.NewMemory for a test: an option it rejects fails the test.
func newMemory(tb testing.TB, opts ...store.MemoryOption) *store.Memory {
	tb.Helper()
	m, err := store.NewMemory(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// newRedis is store.NewRedis for a test: an option it rejects fails the test.
func newRedis(tb testing.TB, c redis.UniversalClient, opts ...store.RedisOption) *store.Redis {
	tb.Helper()
	st, err := store.NewRedis(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
