// Package rlqs lets tollgate's interceptors decide locally from quota
// assignments of a Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3): tollgate-rls's (package rls), or
// any other. A Client is a tollgate.Store: give it to interceptor.New and
// the Limiter's rules decide every call in process, from the token bucket
// the server assigned this replica, with no store call per request. The
// Client reports each bucket's usage on one stream per Client every
// report interval, and the server re-balances the replicas' shares of the
// global limit from those reports.
//
// A bucket the Client has no valid assignment for (before the first
// arrives, after it expired, while the stream is down) is an error, so the
// rule's FailMode applies, as when Redis is down. A denial is an ordinary
// tollgate.Decision: the interceptor answers RESOURCE_EXHAUSTED with the
// RetryInfo of the bucket, and records the same telemetry.
package rlqs
