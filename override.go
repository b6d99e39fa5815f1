package tollgate

import (
	"context"
	"time"
)

// Override replaces the limits of one identity, for the replicas that share
// a store: each replica's limiter finds it within its refresh delay.
type Override struct {
	// Key is the identity, as Request.Key.
	Key string
	// Limits replace the identity's limits; none blocks it.
	Limits []Limit
	// Expires is when the override ends, on this process's clock; zero
	// for never.
	Expires time.Time
}

// OverrideStore is a Store that also keeps overrides, in scopes (a rule's
// name, say), so that every replica sharing it sees them. Both stores of
// package store implement it.
type OverrideStore interface {
	Store
	// SetOverride stores o in scope, replacing any override of o.Key
	// there; it ends ttl from now (0: never).
	SetOverride(ctx context.Context, scope string, o Override, ttl time.Duration) error
	// DeleteOverride removes the override of key from scope, if any.
	DeleteOverride(ctx context.Context, scope, key string) error
	// Overrides returns the overrides of scope in force.
	Overrides(ctx context.Context, scope string) ([]Override, error)
	// OverridesVersion returns a number that changes whenever an override
	// of any scope is set or deleted, so that a replica knows when to read
	// them again.
	OverridesVersion(ctx context.Context) (int64, error)
}

// OverrideWatcher is an OverrideStore that says when its overrides may have
// changed, through any of its users, so that a limiter reads them at once
// rather than at its next refresh. Store Redis says it with Redis pub/sub,
// Memory in process. A watch may miss a change (a lost connection): a
// limiter still asks OverridesVersion within its refresh delay.
type OverrideWatcher interface {
	OverrideStore
	// WatchOverrides calls changed soon after an override of any scope is
	// set or deleted, and whenever a change may have been missed (the
	// watch reconnected), until stop is called. changed is called one call
	// at a time and should return quickly. stop ends the watch and returns
	// once changed is no longer running and nothing the watch started is.
	WatchOverrides(changed func()) (stop func())
}
