// Package httplimit puts a tollgate interceptor.Limiter in front of net/http
// handlers: the same rules, key functions, overrides, request ids, seats,
// settlements, fail modes, shadow rules and telemetry as the gRPC
// interceptors, on the same store, so that a tenant has one quota whether
// it calls over gRPC, Connect or plain HTTP.
//
// A request is a call to its route: its method and net/http ServeMux
// pattern ("GET /items/{id}"), which rules name in Rule.Methods and
// keyfunc.Method returns. Key functions read its headers as they read gRPC
// metadata (keyfunc.Metadata("x-tenant") reads X-Tenant) and its remote
// address as the peer (keyfunc.Peer); a request id comes in the Limiter's
// request id header (x-request-id by default), so a retried POST is not
// debited twice.
//
// A refused request gets its status (429 Too Many Requests for a denial,
// with Retry-After), a problem details body (RFC 9457,
// application/problem+json) and, as every limited response, the
// RateLimit-Policy and RateLimit fields of the IETF httpapi draft "RateLimit
// header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers-12), which
// WithoutRateLimitFields leaves out. An admitted request's seats are held
// until its handler returns, streaming responses included, and its rules
// are settled from what the handler wrote (Response): its status, its
// bytes (SettleBytes), its body (SettleBody) or the cost it reported with
// interceptor.ReportCost.
package httplimit
