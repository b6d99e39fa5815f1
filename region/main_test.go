package region

import (
	"testing"

	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/storefixture"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The stores of package store, as a test asks for them (storefixture).
var (
	newMemory = storefixture.Memory
	newRedis  = storefixture.Redis
)
