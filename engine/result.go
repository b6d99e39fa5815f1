package engine

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// result is one rule's decision on a call (or the call's, once its rules'
// are put together), before a door translates it.
type result struct {
	outcome  outcome
	decision tollgate.Decision
	// limit and cost are what was asked of the store (the local cap under
	// FailLocal); limit is zero when no store was asked.
	limit tollgate.Limit
	cost  int64
	// stated: a store decided, so there is a limit's state to report.
	stated bool
	// storeFailed reports that the rule's FailMode applied.
	storeFailed bool
	// shape says a denial may be waited out within a stream (every
	// denying rule is Shape), for at most maxShapeWait; seatWait says the
	// same of a stream's opening that found no free seat.
	shape, seatWait bool
	maxShapeWait    time.Duration
	// err refuses the call (a *refusal, or errSkipped for a rule another
	// refused); nil admits it.
	err error
	// cause is recorded on the span as an error.
	cause error
}

func (res *result) allowed() bool { return res.err == nil }

// hasDecision reports whether a store decided, so that there is a limit's
// state to report.
func (res *result) hasDecision() bool {
	switch res.outcome {
	case outcomeAllowed, outcomeDenied, outcomeReplayed, outcomeFailLocal, outcomeSkipped:
		return res.stated
	}
	return false
}

// reject fills res with a refusal of the given kind. cause, when not nil,
// is recorded on the span and wrapped by the refusal; otherwise the
// message is recorded.
func (res *result) reject(o outcome, kind Kind, cause error, format string, args ...any) {
	r := &refusal{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
	res.outcome, res.err, res.cause = o, r, cause
	if cause == nil {
		res.cause = r
	}
}

// fail fills res after a function of the rule failed with err: the rule's
// fault, whose cause a door may pass on (a status the error carries).
func (res *result) fail(o outcome, err error, format string, args ...any) {
	res.reject(o, Fault, err, format, args...)
}

// decided fills res with c's decisions: the most restrictive one (the
// denying one with the longest wait, else the one with the fewest units
// left) is the one its span describes.
func (res *result) decided(c *check) {
	res.stated = true
	if len(c.decs) == 0 {
		// An in-flight limit alone: the seat is the decision.
		res.decision = tollgate.Decision{Allowed: true, Remaining: max(c.seat.req.Max-c.seat.dec.InUse, 0)}
		res.outcome = outcomeAllowed
		if c.refused {
			res.decision.Allowed = false
			res.skip()
		}
		return
	}
	best := 0
	denied := c.denied()
	for i, d := range c.decs[1:] {
		b := c.decs[best]
		switch {
		case denied:
			if c.denies(d) && (!c.denies(b) || d.RetryAfter > b.RetryAfter) {
				best = i + 1
			}
		case d.Remaining < b.Remaining:
			best = i + 1
		}
	}
	dec := c.decs[best]
	res.decision, res.limit = dec, c.limits[best].limit
	switch {
	case denied:
		res.outcome = outcomeDenied
		res.shape, res.maxShapeWait = c.p.rule.shape, c.p.rule.maxShapeWait
		res.err = denial([]*check{c})
	case !dec.Allowed:
		res.skip()
	case dec.Replayed:
		res.outcome = outcomeReplayed
	default:
		res.outcome = outcomeAllowed
	}
}

// errSkipped is the result of a check whose own limits would have admitted
// the call that another rule refused: nothing was debited. It never reaches
// a door.
var errSkipped = &refusal{kind: Denied, msg: "another rule refused the call; this rule debited nothing"}

// skip marks a check whose limits admitted a call another rule refused.
func (res *result) skip() {
	res.outcome, res.err = outcomeSkipped, errSkipped
}

// shadowed turns a shadow check's refusal into a record. When an enforcing
// rule refused the call, the check keeps its result (the call did not go
// on); otherwise the call goes on whatever the check decided.
func (res *result) shadowed(refused bool) {
	if refused {
		return
	}
	if res.outcome == outcomeDenied {
		// A denial is the limiter working, not an error: the span says it
		// with the outcome, as for an enforced denial.
		res.outcome = outcomeShadowDenied
	}
	res.err = nil
}

// seatDenied fills res with the denial of a check refused for lack of a
// seat.
func (res *result) seatDenied(c *check) {
	res.outcome, res.stated = outcomeDenied, true
	res.decision = tollgate.Decision{RetryAfter: seatRetryAfter(c)}
	res.seatWait, res.maxShapeWait = c.seat.stream && c.p.inFlight.streamWait > 0, c.p.inFlight.streamWait
	res.err = denial([]*check{c})
}

// failClosed fills res with the refusal of a rule whose store cannot decide.
func (res *result) failClosed(rule string) {
	res.outcome = outcomeFailClosed
	res.err = &refusal{kind: Unavailable, msg: fmt.Sprintf("rate limit %q: rate limiter unavailable: its store cannot decide", rule), cause: res.cause}
}
