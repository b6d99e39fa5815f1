// Package interceptor turns a tollgate.Store into gRPC server interceptors.
//
// A Limiter holds an ordered list of Rules. For every call it finds the
// first rule whose Methods match the call's full method name, asks the
// rule's key function who is calling, and asks the store for one decision
// under the rule's Limit. Calls that no rule matches are never limited.
//
// An admitted call carries the x-ratelimit-limit, x-ratelimit-remaining and
// x-ratelimit-reset trailers. A denied call fails with
// codes.ResourceExhausted, a message naming the rule and the wait, the
// details errdetails.RetryInfo and errdetails.QuotaFailure, and the trailers
// grpc-retry-pushback-ms and retry-after besides the x-ratelimit-* ones.
// Everything goes in trailers, never in headers: a header frame commits the
// call, and grpc-go only retries (and honours pushback for) calls whose
// response is trailers-only.
//
// When the store fails or exceeds its deadline (WithStoreTimeout), the
// rule's FailMode decides: admit, refuse with codes.Unavailable, or decide
// in process under a per-replica cap. A circuit breaker (WithBreaker) stops
// waiting on a store that keeps failing.
//
// Every decision is one child span named "ratelimit <rule>" and one count
// in the tollgate.decisions metric; see WithTracerProvider and
// WithMeterProvider.
package interceptor
