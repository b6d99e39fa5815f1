package store

import "context"

// Ping returns ctx's error, if any: a Memory store always answers.
func (m *Memory) Ping(ctx context.Context) error { return ctx.Err() }
