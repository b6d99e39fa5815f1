// Package interceptor is the gRPC door of a tollgate engine.Limiter: its
// unary and stream server interceptors ask the engine about every call and
// answer a refusal the gRPC way.
//
// A denied call fails with codes.ResourceExhausted, a message naming the
// rule and the wait, the details errdetails.RetryInfo and
// errdetails.QuotaFailure, and the trailers grpc-retry-pushback-ms,
// retry-after, ratelimit-policy and ratelimit (every deciding limit, with
// the names and values httplimit gives the RateLimit-Policy and RateLimit
// fields) and the legacy x-ratelimit-limit, x-ratelimit-remaining and
// x-ratelimit-reset (the most restrictive limit, as Envoy's rate limit
// filter names it). An admitted call carries the rate-limit trailers only
// with WithAdmittedTrailers (a replay says so with x-ratelimit-replayed
// either way).
// Everything goes in trailers, never in headers: a header frame commits the
// call, and grpc-go only retries (and honours pushback for) calls whose
// response is trailers-only.
//
// The rules, key functions, overrides, request ids, seats, settlements,
// fail modes, shadow rules and telemetry are the engine's (package engine),
// the same behind every door: New builds a Limiter as engine.New does, and
// its engine serves package httplimit and the connectlimit module too.
package interceptor
