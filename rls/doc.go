// Package rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) from any tollgate.Store, so
// that the edge and the gRPC interceptors of the services behind it share
// one quota in one store.
//
// Configuration is envoyproxy/ratelimit's YAML, unchanged: one file per
// domain, nested descriptors with key and optional value (a '*' in a value
// is a wildcard), rate_limit with unit and requests_per_unit, unlimited,
// shadow_mode, quota_mode, name and replaces, detailed_metric,
// share_threshold. Its units become fixed windows aligned as that project
// aligns them; the tollgate block inside rate_limit (key tollgate) chooses
// another algorithm, a burst, or calendar windows. ParseConfig and LoadDir
// report a mistake with its file, line and descriptor;
// ParseRateLimitConfigs compiles the same configuration pushed over xDS
// (Envoy Gateway's RateLimitConfig resources) with the same checks.
//
// A request's descriptors are matched as envoyproxy/ratelimit matches them.
// Beyond that project, the limited descriptors of one request are decided
// all or nothing with one Store.AllowAll: a request refused by one
// descriptor debits none of the others. Shadow-mode descriptors are decided
// on their own and never refuse a request. StoreKey documents the store
// keys, which an interceptor.Rule can share through Descriptor.
//
// NewQuotaServer serves Envoy's Rate Limit Quota Service from the same
// Server: each data plane decides locally from a token bucket of its
// max-min fair share of a descriptor's limit and reports its usage; the
// shares come from a tollgate.ShareStore, so several servers on one Redis
// assign from the same demands.
package rls
