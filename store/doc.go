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
//
// The package's files are in rooms: memory*.go is the Memory store;
// redis*.go the Redis store, by job (redis_keys.go where keys live,
// redis_call.go and redis_batcher.go a call's way to Redis and back,
// redis_script.go and redis_send.go the scripts and the one function that
// sends them, redis_allowall.go and redis_settle.go the sets and the
// settlements, redis_failover.go and redis_journal.go its part of exact
// failovers, whose machinery is store/internal/failover); options.go and
// validate.go are what both share.
package store
