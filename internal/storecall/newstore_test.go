package storecall

import (
	"testing"

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
