package tollgate_test

import "github.com/tollgate/tollgate/internal/storefixture"

// The stores of package store, as a test asks for them (storefixture).
var (
	newMemory = storefixture.Memory
	newRedis  = storefixture.Redis
)
