package engine

import (
	"strconv"
	"time"

	"github.com/tollgate/tollgate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// result is one decision, before it is translated for gRPC.
type result struct {
	outcome  outcome
	decision tollgate.Decision
	// limit and cost are what was asked of the store (the local cap under
	// FailLocal); limit is zero when no store was asked.
	limit tollgate.Limit
	cost  int64
	// limitHeader is x-ratelimit-limit for limit.
	limitHeader string
	// storeFailed reports that the rule's FailMode applied.
	storeFailed bool
	// shape says a denial may be waited out within a stream (every
	// denying rule is Shape), for at most maxShapeWait; seatWait says the
	// same of a stream's opening that found no free seat.
	shape, seatWait bool
	maxShapeWait    time.Duration
	// err is the status returned to the client; nil admits the call.
	err error
	// cause is recorded on the span as an error.
	cause error
}

func (res *result) allowed() bool { return res.err == nil }

// hasDecision reports whether a store decided, so that there is something
// to say in trailers.
func (res *result) hasDecision() bool {
	switch res.outcome {
	case outcomeAllowed, outcomeDenied, outcomeReplayed, outcomeFailLocal, outcomeSkipped:
		return res.limitHeader != ""
	}
	return false
}

// reject fills res with a refusal of the given code. cause, when not nil,
// is recorded on the span; otherwise the message is.
func (res *result) reject(o outcome, code codes.Code, cause error, format string, args ...any) {
	st := status.Newf(code, format, args...)
	res.outcome, res.err = o, st.Err()
	res.cause = cause
	if cause == nil {
		res.cause = res.err
	}
}

// fail fills res after a function of the rule failed with err: a gRPC
// status from it is passed to the client as it is, anything else becomes
// codes.Internal.
func (res *result) fail(o outcome, err error, format string, args ...any) {
	if st, ok := status.FromError(err); ok {
		res.outcome, res.err, res.cause = o, st.Err(), err
		return
	}
	res.reject(o, codes.Internal, err, format, args...)
}

// decided fills res with c's decisions: the most restrictive one (the
// denying one with the longest wait, else the one with the fewest units
// left) is the one its trailers and span describe.
func (res *result) decided(c *check) {
	if len(c.decs) == 0 {
		// An in-flight limit alone: the seat is the decision.
		res.limitHeader = c.p.inFlight.header
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
	res.decision, res.limit, res.limitHeader = dec, c.limits[best].limit, c.limits[best].header
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
	res.outcome = outcomeDenied
	res.decision = tollgate.Decision{RetryAfter: seatRetryAfter(c)}
	res.limitHeader = c.p.inFlight.header
	res.seatWait, res.maxShapeWait = c.seat.stream && c.p.inFlight.streamWait > 0, c.p.inFlight.streamWait
	res.err = denial([]*check{c})
}

// trailer returns the rate-limit trailers for res, or nil when no store
// decided. An admitted call gets the x-ratelimit-* ones only when all is
// set, and x-ratelimit-replayed when it was a replay.
func (res *result) trailer(all bool) metadata.MD {
	if !res.hasDecision() {
		return nil
	}
	dec := res.decision
	if res.err == nil && !all {
		if dec.Replayed {
			return metadata.MD{TrailerReplayed: []string{"1"}}
		}
		return nil
	}
	n := 3 // limit, remaining, reset
	if dec.Replayed {
		n++
	}
	if !dec.Allowed {
		n += 2 // retry-after, pushback
	}
	// One backing array for every value, of the exact size: one allocation
	// instead of one per key, and no room left unused.
	vals := make([]string, 3, n)
	vals[0], vals[1], vals[2] = res.limitHeader, strconv.FormatInt(dec.Remaining, 10), ceilUnits(dec.ResetAfter, time.Second)
	md := metadata.MD{TrailerLimit: vals[0:1:1], TrailerRemaining: vals[1:2:2], TrailerReset: vals[2:3:3]}
	if dec.Replayed {
		vals = append(vals, "1")
		md[TrailerReplayed] = vals[3:4:4]
	}
	if !dec.Allowed {
		vals = append(vals, ceilUnits(dec.RetryAfter, time.Second), ceilUnits(dec.RetryAfter, time.Millisecond))
		i := len(vals) - 2
		md[TrailerRetryAfter], md[TrailerPushback] = vals[i:i+1:i+1], vals[i+1:i+2:i+2]
	}
	return md
}

// failClosed fills res with the refusal of a rule whose store cannot decide.
func (res *result) failClosed(rule string) {
	res.outcome = outcomeFailClosed
	res.err = status.Errorf(codes.Unavailable, "rate limit %q: rate limiter unavailable: its store cannot decide", rule)
}
