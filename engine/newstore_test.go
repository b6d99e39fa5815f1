package engine

import "github.com/tollgate/tollgate/internal/storefixture"

// The stores of package store, as a test asks for them (storefixture).
var (
	newMemory = storefixture.Memory
)
