// Package httplimit is the net/http door of a tollgate engine.Limiter: the
// same rules, key functions, overrides, request ids, seats, settlements,
// fail modes, shadow rules and telemetry as the gRPC and Connect doors, on
// the same store, so that a tenant has one quota whether it calls over
// gRPC, Connect or plain HTTP. It imports no gRPC package.
//
// A request is a call to its route: its method and net/http ServeMux
// pattern ("GET /items/{id}"), which rules name in Rule.Methods and
// keyfunc.Method returns. Wrap the ServeMux (its routes name requests,
// even when it is mounted under another mux) or the handlers it routes to
// (the pattern that routed the request names it). Key functions read its
// headers as the other doors' metadata (keyfunc.Metadata("x-tenant") reads
// X-Tenant; a "-bin" header's base64 value is decoded, as gRPC decodes
// it) and its remote address as the peer (keyfunc.Peer); a request id
// comes in the Limiter's request id header (x-request-id by default), so a
// retried POST is not debited twice.
//
// A refused request gets its status (429 Too Many Requests for a denial,
// with Retry-After), a problem details body (RFC 9457,
// application/problem+json) and, as every limited response, the
// RateLimit-Policy and RateLimit fields of the IETF httpapi draft
// "RateLimit header fields for HTTP"
// (draft-ietf-httpapi-ratelimit-headers-12), which WithoutRateLimitFields
// leaves out: one item per deciding limit, each with its own state, the
// same values the RPC doors send as ratelimit-policy and ratelimit
// metadata. An admitted request's seats are held until its handler
// returns, streaming responses included, and its rules are settled from
// what the handler wrote (Response): its status, its bytes (SettleBytes),
// its body (SettleBody) or the cost it reported with engine.ReportCost.
package httplimit
