// Package telemetry names, for Go code that reads them, the metrics of
// overload control (engine.Config.Overload) and the counter of the writes
// the Redis store's failover journal dropped. Every metric and span
// attribute tollgate records, these included, is listed with its unit,
// attributes and values in docs/observability.md.
package telemetry

import "github.com/tollgate/tollgate/internal/telemetry"

// Metrics of overload control, package engine's.
const (
	// MetricOverloadLimit is a gauge of the adaptive concurrency limit
	// ({call}; 1 while the latency alone is probed).
	MetricOverloadLimit = telemetry.MetricOverloadLimit
	// MetricOverloadInFlight is a gauge of the calls holding a seat under
	// the limit ({call}).
	MetricOverloadInFlight = telemetry.MetricOverloadInFlight
	// MetricOverloadQueued is a gauge of the calls waiting for a seat
	// ({call}).
	MetricOverloadQueued = telemetry.MetricOverloadQueued
	// MetricOverloadShed counts the calls shed ({call}), with the
	// attributes AttrCriticality, AttrOverloadReason and AttrTenantShare.
	MetricOverloadShed = telemetry.MetricOverloadShed
)

// Attributes of MetricOverloadShed.
const (
	// AttrCriticality is a call's criticality as overload.Header carries
	// it: "CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS" or "SHEDDABLE".
	AttrCriticality = telemetry.AttrCriticality
	// AttrOverloadReason is why a call was shed: "queue_full",
	// "evicted" or "queue_timeout".
	AttrOverloadReason = telemetry.AttrOverloadReason
	// AttrTenantShare is "within" or "over" the tenant's fair share.
	AttrTenantShare = telemetry.AttrTenantShare
)

// MetricJournalDropped counts the writes the Redis store's failover
// journal dropped for its memory cap ({write}).
const MetricJournalDropped = telemetry.MetricJournalDropped
