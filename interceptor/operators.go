package interceptor

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/grpcstatus"
)

// The engine's operator methods, answering in gRPC statuses: NotFound for
// an unknown rule, InvalidArgument for an argument that cannot be used,
// FailedPrecondition for a store that keeps no overrides, Unavailable for
// a store that failed.

// Peek is engine.Limiter.Peek, its errors gRPC statuses.
func (l *Limiter) Peek(ctx context.Context, rule string, who Caller) ([]engine.Quota, error) {
	qs, err := l.Limiter.Peek(ctx, rule, who)
	return qs, grpcstatus.Of(err)
}

// Reset is engine.Limiter.Reset, its errors gRPC statuses.
func (l *Limiter) Reset(ctx context.Context, rule string, who Caller) error {
	return grpcstatus.Of(l.Limiter.Reset(ctx, rule, who))
}

// SetOverride is engine.Limiter.SetOverride, its errors gRPC statuses.
func (l *Limiter) SetOverride(ctx context.Context, rule string, who Caller, limits []tollgate.Limit, ttl time.Duration) error {
	return grpcstatus.Of(l.Limiter.SetOverride(ctx, rule, who, limits, ttl))
}

// Block is engine.Limiter.Block, its errors gRPC statuses.
func (l *Limiter) Block(ctx context.Context, rule string, who Caller, ttl time.Duration) error {
	return grpcstatus.Of(l.Limiter.Block(ctx, rule, who, ttl))
}

// DeleteOverride is engine.Limiter.DeleteOverride, its errors gRPC
// statuses.
func (l *Limiter) DeleteOverride(ctx context.Context, rule string, who Caller) error {
	return grpcstatus.Of(l.Limiter.DeleteOverride(ctx, rule, who))
}

// Overrides is engine.Limiter.Overrides, its errors gRPC statuses.
func (l *Limiter) Overrides(ctx context.Context, rule string) ([]engine.CallerOverride, error) {
	os, err := l.Limiter.Overrides(ctx, rule)
	return os, grpcstatus.Of(err)
}
