package engine

import (
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
)

// FailMode says what a rule does when the store cannot decide: it returned
// an error other than tollgate.ErrInvalidRequest, it passed its deadline
// (Config.StoreTimeout), or the circuit breaker is open
// (Config.BreakerFailures). It is
// FailOpen, FailClosed, FailLocal or FailLocalAt(limit); the zero value is
// FailOpen. Its String is the tollgate.fail_mode span attribute
// (telemetry.AttrFailMode).
type FailMode struct {
	kind failKind
	// at: local is FailLocalAt's cap.
	at    bool
	local tollgate.Limit
}

type failKind uint8

const (
	failOpen failKind = iota
	failClosed
	failLocal
)

// The fail modes. They are values of a struct type, so that FailLocalAt can
// carry its cap: compare them with ==, never assign to them.
var (
	// FailOpen admits the call. The span and the tollgate.decisions metric
	// record it (fail mode "open", outcome "fail_open"). Pick it when
	// serving without a limit for a while is better than not serving.
	FailOpen = FailMode{kind: failOpen}
	// FailClosed refuses the call as Unavailable (gRPC's and Connect's
	// Unavailable, HTTP's 503): the limiter, not the client, is at fault,
	// and that is the answer clients retry.
	// Pick it when an unmetered call costs more than a refused one.
	FailClosed = FailMode{kind: failClosed}
	// FailLocal decides in process, on the Limiter's local store
	// (Config.LocalStore), under each of the rule's limits divided by
	// Config.Replicas (rounded up; the limit itself without it): each
	// replica enforces its own cap until the shared store answers again,
	// and with N replicas the fleet admits up to N times the limit. In-flight
	// limits are divided the same way.
	FailLocal = FailMode{kind: failLocal}
)

// FailLocalAt is FailLocal under one per-replica cap, limit, whatever the
// rule's limits (for PerCaller limits, say). New checks that the rule's
// Cost fits it; a call whose CostFunc or PerCaller limits make it too small
// for the call is refused as FailClosed would.
func FailLocalAt(limit tollgate.Limit) FailMode {
	return FailMode{kind: failLocal, at: true, local: limit}
}

// LocalLimit returns FailLocalAt's cap, and false for the other modes
// (FailLocal's cap is each limit divided by Config.Replicas).
func (m FailMode) LocalLimit() (tollgate.Limit, bool) {
	return m.local, m.at
}

// String returns "open", "closed" or "local".
func (m FailMode) String() string {
	switch m.kind {
	case failClosed:
		return storecall.FailModeClosed
	case failLocal:
		return storecall.FailModeLocal
	}
	return storecall.FailModeOpen
}

// explicitLocal is FailLocalAt's cap, nil for FailLocal and other modes.
func (m FailMode) explicitLocal() *tollgate.Limit {
	if l, ok := m.LocalLimit(); ok {
		return &l
	}
	return nil
}
