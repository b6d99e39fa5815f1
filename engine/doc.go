// Package engine is tollgate's decision core: it decides the calls every
// door presents to it (the gRPC interceptors of package interceptor, the
// net/http middleware of package httplimit, the connect-go interceptor of
// the connectlimit module) by rules over a tollgate.Store, and speaks no
// wire protocol: it imports no gRPC or Connect package.
//
// A Limiter holds a list of Rules. For every call it finds every rule whose
// Methods match the call's method or route (less those another matching
// rule replaces, Rule.Replaces), asks each rule's key function who is
// calling (from the call's neutral view, keyfunc.Call), and asks the store
// to decide all their limits at once, all or nothing: one Store.Allow for a
// single limit, one Store.AllowAll for more. A call denied by any limit
// debits none. Shadow rules (Rule.Shadow) are decided and debited but never
// deny. Calls that no rule matches are never limited.
//
// A door presents a call with Begin and gets a Verdict: Err says whether
// the call goes on; a refusal has a Kind (Denied, Blocked, Invalid,
// Unavailable, Fault, Canceled), the exact wait of a denial (RetryAfter),
// and every deciding limit's own state (Limits), which each door reports
// with the same names and values (the RateLimit-Policy and RateLimit
// fields over HTTP, the same values as gRPC and Connect metadata). The door
// translates the refusal into its wire's terms, runs an admitted call's
// handler with the Verdict's Context, and ends the call (End), which
// settles its rules and gives its seats back without the response waiting.
//
// When the store fails or exceeds its deadline (Config.StoreTimeout), each
// rule's FailMode decides: admit, refuse as Unavailable, or decide in
// process under a per-replica cap (on Config.LocalStore). Across the rules
// of one call, a fail-closed refusal wins over fail-local decisions, which
// win over fail-open admissions. A circuit breaker (Config.BreakerFailures)
// stops waiting on a store that keeps failing.
//
// Limiter.Peek reads a caller's quota under a rule and Limiter.Reset gives
// it back whole; Limiter.SetOverride and Limiter.Block change one caller's
// limits on every replica sharing the store, within a round trip when the
// store announces changes and never later than Config.OverrideRefresh;
// package admin serves them as a gRPC service. Limiter.Close stops the
// watch of the store's overrides and delivers what ended calls still owe.
//
// Every decision is one child span named "ratelimit <rule>" and one count
// in the tollgate.decisions metric (Config.TracerProvider,
// Config.MeterProvider). Package telemetry names every span attribute and
// metric.
package engine
