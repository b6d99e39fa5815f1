package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind says why a call was refused (Verdict.Kind), in the terms every door
// maps to its own answer: gRPC codes, HTTP statuses, Connect codes.
type Kind uint8

const (
	// Denied: a limit refused the call (a rate, or calls in flight). The
	// same call is admitted after Verdict.RetryAfter if nobody else
	// consumes. gRPC ResourceExhausted, HTTP 429.
	Denied Kind = iota + 1
	// Blocked: an override blocks the caller (Limiter.Block). gRPC
	// PermissionDenied, HTTP 403.
	Blocked
	// Invalid: the call cannot be decided, by the caller's fault: its
	// identity is missing or invalid (keyfunc.ErrMissing, ErrInvalid), its
	// request id malformed, or its cost more than a limit can ever admit.
	// gRPC InvalidArgument, HTTP 400.
	Invalid
	// Unavailable: the store cannot decide and a rule fails closed
	// (FailClosed): the limiter, not the caller, is at fault. gRPC
	// Unavailable, HTTP 503.
	Unavailable
	// Fault: a rule failed (its Key, PerCaller or CostFunc), or the limiter
	// is misconfigured; a door passes on a status the error carries (Err
	// wraps it). gRPC Internal, HTTP 500.
	Fault
	// Canceled: the caller went away (its context ended) before the
	// decision was made. Err wraps the context's error.
	Canceled
	// Shed: overload control (Config.Overload) shed the call to protect
	// the server; the caller may retry after Verdict.RetryAfter, jittered.
	// Err wraps an *overload.Refusal. gRPC Unavailable, HTTP 503.
	Shed
)

var kindNames = [...]string{Denied: "denied", Blocked: "blocked", Invalid: "invalid", Unavailable: "unavailable", Fault: "fault", Canceled: "canceled", Shed: "shed"}

// String returns the kind's lower-case name: "denied", "blocked", ….
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// refusal is the error of a refused call: its kind, its message (naming
// the rule and what to do), the exact wait of a denial, and the cause a
// door may look into (a key function's error, the context's).
type refusal struct {
	kind       Kind
	msg        string
	retryAfter time.Duration
	cause      error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.cause }

// denial is the refusal of a call the denying limits of checks (those of
// the checks that denied) did not admit: its wait is the longest of theirs,
// after which every one admits the call if nobody else consumes; its
// message names every denying rule and the wait. It names rules, never the
// caller's identity: key functions may read credentials, and a message
// travels through proxies and logs.
func denial(checks []*check) *refusal {
	var (
		wait  time.Duration
		names []string
		rates bool // a rate limit denied, not only in-flight ones
	)
	for _, c := range checks {
		name := c.p.rule.Name
		if c.seat.refused() {
			wait = max(wait, seatRetryAfter(c))
			names = append(names, strconv.Quote(name))
			continue
		}
		if !c.denied() {
			continue
		}
		rates = true
		names = append(names, strconv.Quote(name))
		for _, d := range c.decs {
			if c.denies(d) {
				wait = max(wait, d.RetryAfter)
			}
		}
	}
	kind := "rate limit"
	if !rates {
		kind = "in-flight limit"
	}
	what := kind + " " + names[0]
	if len(names) > 1 {
		what = kind + "s " + strings.Join(names, ", ")
	}
	return &refusal{kind: Denied, msg: fmt.Sprintf("%s exceeded: retry after %s", what, roundUp(wait, time.Millisecond)), retryAfter: wait}
}

// roundUp rounds a non-negative d up to a multiple of unit.
func roundUp(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + unit - 1) / unit * unit
}
