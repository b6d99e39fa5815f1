// Package storefixture builds the stores of package store for tests: an
// option a constructor rejects fails the test at once, so a test reads as
// the store it asks for.
package storefixture

import (
	"testing"

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

// Redis is store.NewRedis for a test: an option it rejects fails tb.
func Redis(tb testing.TB, c redis.UniversalClient, opts ...store.RedisOption) *store.Redis {
	tb.Helper()
	st, err := store.NewRedis(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
