package orcaload_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when a goroutine outlives them: the servers,
// clients and balancers they start are all stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
