package store

import (
	"testing"

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

// newRedis is NewRedis for a test: an option it rejects fails the test.
func newRedis(tb testing.TB, c redis.UniversalClient, opts ...RedisOption) *Redis {
	tb.Helper()
	st, err := NewRedis(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
