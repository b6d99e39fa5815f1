// Package store holds the implementations of tollgate.Store.
package store

import (
	"context"
	"errors"

	"github.com/tollgate/tollgate"
)

// Memory is an in-process tollgate.Store.
type Memory struct{}

// MemoryOption configures a Memory store.
type MemoryOption func(*Memory)

// NewMemory returns an empty in-process store.
func NewMemory(opts ...MemoryOption) *Memory { return &Memory{} }

// Allow makes one decision.
func (m *Memory) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	return tollgate.Decision{}, errors.New("not implemented")
}
