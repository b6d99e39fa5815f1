// Package telemetry names every span attribute and metric tollgate emits,
// in one place, for the packages that record them; docs/observability.md
// lists the same names, with their units and values, for dashboards,
// alerts and tests that read them.
//
// Package engine starts one span per decision, named "ratelimit <rule>",
// whichever door the call came through, and package rls one per request; both record into
// MetricDecisions and MetricStoreDuration with the same attributes, so one
// dashboard shows the edge and the services. The other metrics belong to
// one feature each and say so.
//
// Metric instruments are created on meters named after the package that
// records them ("github.com/tollgate/tollgate/engine", ".../rls",
// ".../store"); tracers likewise.
package telemetry

import "go.opentelemetry.io/otel/attribute"

// Metrics of decisions, package engine's and package rls's.
const (
	// MetricDecisions counts decisions ({decision}), with the attributes
	// AttrRule, AttrScope, AttrOutcome and AttrAllowed.
	MetricDecisions = "tollgate.decisions"
	// MetricStoreDuration is a histogram of how long the shared store took
	// to answer or fail, in seconds (buckets from 50µs to 1s), with the
	// attributes AttrRule and AttrStoreResult. Calls the circuit breaker
	// kept from the store are not in it.
	MetricStoreDuration = "tollgate.store.duration"
)

// Metrics of the shared store's health, as a Limiter sees it (package
// engine): each change is also logged once, at WARN, rate-limited.
const (
	// MetricStoreReachable is a gauge: 1 while the store answers, 0 from
	// the first call it failed (an error, its deadline, the breaker open)
	// until one it answers.
	MetricStoreReachable = "tollgate.store.reachable"
	// MetricStoreOutages counts the times the store became unreachable
	// ({outage}).
	MetricStoreOutages = "tollgate.store.outages"
	// MetricFailModeEpisodes counts the times a rule started answering by
	// its fail mode during an outage ({episode}), with the attributes
	// AttrRule and AttrFailMode.
	MetricFailModeEpisodes = "tollgate.fail_mode.episodes"
)

// Metrics of settlements (engine.Rule.Settle).
const (
	// MetricSettles counts settlements ({settlement}), with the attributes
	// AttrRule and AttrSettleOutcome.
	MetricSettles = "tollgate.settles"
	// MetricSettledUnits counts the units of settlements ({unit}), with the
	// attributes AttrRule and AttrCostKind.
	MetricSettledUnits = "tollgate.settled.units"
)

// Metrics of in-flight seats (engine.Rule.InFlight). Before v1
// they were tollgate.slots, tollgate.slot.hold and tollgate.slot.wait.
const (
	// MetricSeats counts in-flight seat events ({event}), with the
	// attributes AttrRule and AttrSeatOutcome.
	MetricSeats = "tollgate.seats"
	// MetricSeatHold is a histogram of how long calls held their seats, in
	// seconds (buckets from 1ms to 10 minutes), with the attribute AttrRule.
	MetricSeatHold = "tollgate.seat.hold"
	// MetricSeatWait is a histogram of how long stream openings waited for
	// a seat (InFlight.StreamWait), in seconds (the same buckets), with the
	// attribute AttrRule.
	MetricSeatWait = "tollgate.seat.wait"
)

// Metrics of the Redis store, the rate limit service and its server.
const (
	// MetricUnpersisted is the gauge the Redis store sets, once per node at
	// the first decision of a long limit (store.LongWindow): 1 when the node
	// reports neither AOF nor RDB snapshots, 0 when it persists, with the
	// attribute AttrRedisNode.
	MetricUnpersisted = "tollgate.redis.unpersisted"
	// MetricJournalDropped counts the writes the Redis store's failover
	// journal dropped for its memory cap ({write}): each is forgotten if its
	// primary is lost before a replica received it.
	MetricJournalDropped = "tollgate.redis.journal.dropped"
	// MetricRLSQuotaActions counts the rate limit quota service's bucket
	// actions ({action}), with the attributes AttrRLSDomain and
	// AttrRLSAction.
	MetricRLSQuotaActions = "tollgate.rls.quota.actions"
	// MetricRLSConfigReloads counts tollgate-rls's configuration reloads
	// ({reload}), with the attribute AttrResult: "ok", or "error" when a
	// file was bad and the previous configuration kept serving.
	MetricRLSConfigReloads = "tollgate.rls.config.reloads"
	// MetricTLSReloads counts tollgate-rls's reloads of a listener's rotated
	// TLS files, with the attributes AttrListener and AttrResult: "ok", or
	// "error" when the rotated files were refused and the last good ones
	// still serve.
	MetricTLSReloads = "tollgate.tls.reloads"
)

// Metrics of the regions sharing global limits (package region), each
// with the attributes AttrRegion and AttrLimit (the global limit) unless
// said otherwise.
const (
	// MetricRegionShare is a gauge of the shares the region holds now
	// ({unit}), summed over the identities it shares: rate units per the
	// limit's period, or units of the current window.
	MetricRegionShare = "tollgate.region.share"
	// MetricRegionDemand is a gauge of the demand the region last reported
	// ({unit}), summed over the identities it shares: units per period for
	// a rate, units over the next lease for a window.
	MetricRegionDemand = "tollgate.region.demand"
	// MetricRegionLeaseAge is a gauge of the longest time since the Home
	// last granted one of the region's shares, in seconds: past one
	// rebalance interval the region is not renewing (it is cut off from
	// the Home), and past the lease its rates are at their floor.
	MetricRegionLeaseAge = "tollgate.region.lease.age"
	// MetricRegionRefusals counts the requests the region refused for want
	// of share ({request}): the local store denied them under the share,
	// or the share held less than their cost.
	MetricRegionRefusals = "tollgate.region.refusals"
	// MetricRegionReports counts the region's reports to the Home
	// ({report}), with the attributes AttrRegion and AttrResult: "ok",
	// "error" (the Home could not be asked), "disagree" (the regions are
	// configured differently) or "stale" (a window already past).
	MetricRegionReports = "tollgate.region.reports"
)

// Metrics of overload control (engine.Config.Overload), package engine's.
const (
	// MetricOverloadLimit is a gauge of the adaptive concurrency limit
	// ({call}; 1 while the latency alone is probed).
	MetricOverloadLimit = "tollgate.overload.limit"
	// MetricOverloadInFlight is a gauge of the calls holding a seat under
	// the limit ({call}).
	MetricOverloadInFlight = "tollgate.overload.in_flight"
	// MetricOverloadQueued is a gauge of the calls waiting for a seat
	// ({call}).
	MetricOverloadQueued = "tollgate.overload.queued"
	// MetricOverloadShed counts the calls shed ({call}), with the
	// attributes AttrCriticality, AttrOverloadReason and AttrTenantShare.
	MetricOverloadShed = "tollgate.overload.shed"
)

// Attributes of overload control's metrics.
const (
	// AttrCriticality is a call's criticality as overload.Header carries
	// it: "CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS" or "SHEDDABLE".
	AttrCriticality = attribute.Key("tollgate.criticality")
	// AttrOverloadReason is why a call was shed: "queue_full" (no place in
	// the waiting room), "evicted" (a call that goes before it took its
	// place) or "queue_timeout" (it waited its longest without a seat).
	AttrOverloadReason = attribute.Key("tollgate.overload.reason")
	// AttrTenantShare is "within" when the call's tenant was within its
	// fair share of the server, "over" when past it: tenants are
	// unbounded, the class is not.
	AttrTenantShare = attribute.Key("tollgate.tenant.share")
)

// Attributes of decisions, on spans and on MetricDecisions and
// MetricStoreDuration.
const (
	// AttrRule is the rule's name (engine.Rule.Name); in package rls,
	// the descriptor's configuration path, "domain.key_value.key".
	AttrRule = attribute.Key("tollgate.rule")
	// AttrScope is "call" (a unary call or a stream's opening) or "message"
	// (one stream message, engine.Rule.PerMessage).
	AttrScope = attribute.Key("tollgate.scope")
	// AttrAlgorithm is the limit's tollgate.Algorithm.String(): the limit
	// decided, or the most restrictive one of several (spans only).
	AttrAlgorithm = attribute.Key("tollgate.algorithm")
	// AttrLimit is the limit's tollgate.Limit.String() (spans only).
	AttrLimit = attribute.Key("tollgate.limit")
	// AttrCost is the units the call asked for (spans only).
	AttrCost = attribute.Key("tollgate.cost")
	// AttrAllowed is whether the call went on.
	AttrAllowed = attribute.Key("tollgate.allowed")
	// AttrRemaining is tollgate.Decision.Remaining, units left (spans only).
	AttrRemaining = attribute.Key("tollgate.remaining")
	// AttrRetryAfterMs is tollgate.Decision.RetryAfter in milliseconds,
	// rounded up (spans only).
	AttrRetryAfterMs = attribute.Key("tollgate.retry_after_ms")
	// AttrReplayed is tollgate.Decision.Replayed: a retry admitted earlier
	// under the same request id, not debited again (spans only).
	AttrReplayed = attribute.Key("tollgate.replayed")
	// AttrFailMode is "none" when the store decided, else the fail mode
	// that did: "open", "closed" or "local" (spans only).
	AttrFailMode = attribute.Key("tollgate.fail_mode")
	// AttrOutcome is what became of one decision: "allowed", "denied",
	// "replayed", "fail_open", "fail_closed", "fail_local", "invalid" (a
	// malformed request, a bad key, cost or limit), "error" (a function of
	// the rule failed), "canceled" (the caller went away first), "skipped"
	// (this rule would have admitted, another refused: nothing debited),
	// "shadow_denied", "blocked" (an override blocks the caller); in
	// package rls also "peeked" (hits_addend 0) and "refunded"
	// (is_negative_hits).
	AttrOutcome = attribute.Key("tollgate.outcome")
	// AttrStoreResult is "ok" when the store answered, "error" when it
	// failed or passed its deadline (MetricStoreDuration only).
	AttrStoreResult = attribute.Key("tollgate.store.result")
	// AttrShadow is true on the spans of shadow decisions
	// (engine.Rule.Shadow, rls's shadow mode).
	AttrShadow = attribute.Key("tollgate.shadow")
)

// Attributes of settlements and in-flight seats.
const (
	// AttrSettleOutcome is what became of one settlement: "applied",
	// "retried" (the store failed; it waits for another try), "dropped"
	// (the store failed too long, too many waited, or Close ended first:
	// the reservation stands) or "invalid" (the rule's Settle returned a
	// cost out of range).
	AttrSettleOutcome = attribute.Key("tollgate.settle.outcome")
	// AttrCostKind says which units MetricSettledUnits counts: for applied
	// settlements "reserved" (what admission debited) and "final" (what the
	// call cost); for dropped ones "dropped_reserved" (what stays debited)
	// and "dropped_final" (what the call cost, never applied).
	AttrCostKind = attribute.Key("tollgate.cost.kind")
	// AttrFinalCost is the final cost a settlement gave the call, in units
	// (on the span "ratelimit settle <rule>", beside AttrRule and AttrCost,
	// the units reserved).
	AttrFinalCost = attribute.Key("tollgate.final_cost")
	// AttrSeatOutcome is one in-flight seat event: "acquired", "denied"
	// (none free), "released", "release_failed" (the store could not take
	// it back: it expires by itself), "renewed", "renew_failed" or "lost"
	// (it expired before its call ended). Before v1 it was
	// tollgate.slot.outcome.
	AttrSeatOutcome = attribute.Key("tollgate.seat.outcome")
)

// Attributes of the rate limit service, the Redis store and tollgate-rls.
const (
	// AttrRLSDomain is the domain of a rate limit service request (spans,
	// MetricRLSQuotaActions).
	AttrRLSDomain = attribute.Key("tollgate.rls.domain")
	// AttrRLSDescriptors is the number of descriptors of a rate limit
	// service request (spans).
	AttrRLSDescriptors = attribute.Key("tollgate.rls.descriptors")
	// AttrRLSAction is a quota service action: "token_bucket", "allow_all",
	// "deny_all", "abandon", or "none" when the store could not grant and
	// nothing was sent.
	AttrRLSAction = attribute.Key("tollgate.rls.action")
	// AttrRedisNode is the address of a Redis node (MetricUnpersisted).
	AttrRedisNode = attribute.Key("redis.node")
	// AttrListener names a tollgate-rls listener (MetricTLSReloads).
	AttrListener = attribute.Key("listener")
	// AttrResult is "ok" or "error" (MetricRLSConfigReloads,
	// MetricTLSReloads), or a report's result (MetricRegionReports).
	AttrResult = attribute.Key("result")
	// AttrRegion names the region of package region's metrics.
	AttrRegion = attribute.Key("tollgate.region")
)
