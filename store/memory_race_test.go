//go:build race

package store_test

func init() { distinctKeys = 100_000 }
