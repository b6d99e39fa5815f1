// Package store holds the two tollgate.Store implementations: Redis, which
// shares every quota between the replicas of a server through one Lua script
// per decision, and Memory, which keeps the same state in process and gives
// the same answers, for a single replica, tests, and the interceptor's
// fallback when Redis is down.
//
// NewRedis takes any go-redis UniversalClient (a single node, Sentinel through
// NewFailoverClient, or a Cluster); NewMemory needs nothing. Options that
// apply to both stores (WithMaxReplays, WithReplayTTL) are accepted by both
// constructors; the others belong to one. An option given a value outside
// its range makes the constructor return an error wrapping
// ErrInvalidOption, never a panic or a silent clamp. The store's key layout and why a
// script never runs twice are described in docs/redis.md; package storetest
// is the conformance suite both stores pass.
package store
