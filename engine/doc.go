// Package engine turns a tollgate.Store into the decisions every door of
// tollgate (the gRPC interceptors, net/http, connect-go) asks it for.
//
// A Limiter holds a list of Rules. For every call it finds every rule whose
// Methods match the call's full method name (less those another matching
// rule replaces, Rule.Replaces), asks each rule's key function who is
// calling, and asks the store to decide all their limits at once, all or
// nothing: one Store.Allow for a single limit, one Store.AllowAll for more.
// A call denied by any limit debits none. Shadow rules (Rule.Shadow,
// WithShadow) are decided and debited but never deny. Calls that no rule
// matches are never limited.
//
// A denied call fails with codes.ResourceExhausted, a message naming the
// rule and the wait, the details errdetails.RetryInfo and
// errdetails.QuotaFailure, and the trailers grpc-retry-pushback-ms,
// retry-after, x-ratelimit-limit, x-ratelimit-remaining and
// x-ratelimit-reset. An admitted call carries the x-ratelimit-* trailers
// only with WithAdmittedTrailers (a replay says so with
// x-ratelimit-replayed either way).
// Everything goes in trailers, never in headers: a header frame commits the
// call, and grpc-go only retries (and honours pushback for) calls whose
// response is trailers-only.
//
// When the store fails or exceeds its deadline (WithStoreTimeout), each
// rule's FailMode decides: admit, refuse with codes.Unavailable, or decide
// in process under a per-replica cap (on the store WithLocalStore gives).
// Across the rules of one call, a fail-closed refusal wins over fail-local
// decisions, which win over fail-open admissions. A circuit breaker
// (WithBreaker) stops waiting on a store that keeps failing.
//
// Limiter.Peek and Limiter.Reset read and restore a caller's quota under a
// rule; Limiter.SetOverride and Limiter.Block change one caller's limits on
// every replica sharing the store, within a round trip when the store
// announces changes and never later than WithOverrideRefresh; package admin
// serves them as a gRPC service. Limiter.Close stops the watch of the
// store's overrides.
//
// Every decision is one child span named "ratelimit <rule>" and one count
// in the tollgate.decisions metric; see WithTracerProvider and
// WithMeterProvider. Package telemetry names every span attribute and
// metric.
package engine
