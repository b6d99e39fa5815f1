package store

import (
	"testing"

	"github.com/tollgate/tollgate/internal/redistest"
)

// TestMain stops the Redis servers the tests started and checks for leaked
// goroutines.
func TestMain(m *testing.M) { redistest.Main(m) }
