package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Trailer keys. They are the names Envoy's rate limit filter uses, plus
// gRPC's pushback key, and are only ever sent as trailers.
const (
	// TrailerLimit is the limit's capacity: the most units admitted at once.
	TrailerLimit = "x-ratelimit-limit"
	// TrailerRemaining is how many units are left after the decision.
	TrailerRemaining = "x-ratelimit-remaining"
	// TrailerReset is how many seconds (rounded up) until the caller's
	// bucket or window is back to full.
	TrailerReset = "x-ratelimit-reset"
	// TrailerRetryAfter is, on a denial, how many seconds (rounded up) to
	// wait before the same call is admitted.
	TrailerRetryAfter = "retry-after"
	// TrailerPushback is, on a denial, the same wait in milliseconds
	// (rounded up): grpc-go's retry policy waits exactly this long before
	// its next attempt instead of its own backoff.
	TrailerPushback = "grpc-retry-pushback-ms"
	// TrailerReplayed is "1" when the call carried a request id already
	// admitted: it was allowed again without being debited.
	TrailerReplayed = "x-ratelimit-replayed"
)

// denial is the status of a call the denying limits of checks (those of
// the checks that denied) did not admit: RetryInfo is the longest wait, after which every limit admits the
// call if nobody else consumes, and QuotaFailure has one violation per
// denying limit. The subject of a violation is the rule, not the caller's
// identity: key functions may read credentials, and a status travels
// through proxies and logs.
func denial(checks []*check) error {
	var (
		wait       time.Duration
		names      []string
		violations []*errdetails.QuotaFailure_Violation
		rates      bool // a rate limit denied, not only in-flight ones
	)
	for _, c := range checks {
		name := c.p.rule.Name
		if c.seat.refused() {
			wait = max(wait, seatRetryAfter(c))
			names = append(names, strconv.Quote(name))
			violations = append(violations, &errdetails.QuotaFailure_Violation{
				Subject:     "rule:" + name,
				Description: fmt.Sprintf("in flight %d exceeded; retry after %s", c.p.inFlight.max, roundUp(seatRetryAfter(c), time.Millisecond)),
				QuotaId:     name,
				QuotaValue:  c.p.inFlight.max,
			})
			continue
		}
		if !c.denied() {
			continue
		}
		rates = true
		names = append(names, strconv.Quote(name))
		for i, d := range c.decs {
			if !c.denies(d) {
				continue
			}
			wait = max(wait, d.RetryAfter)
			limit := c.limits[i].limit
			violations = append(violations, &errdetails.QuotaFailure_Violation{
				Subject:     "rule:" + name,
				Description: fmt.Sprintf("%s exceeded; retry after %s", limit, roundUp(d.RetryAfter, time.Millisecond)),
				QuotaId:     name,
				QuotaValue:  limit.Capacity(),
			})
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
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("%s exceeded: retry after %s", what, roundUp(wait, time.Millisecond)))
	detailed, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.QuotaFailure{Violations: violations},
	)
	if err != nil {
		// Only a proto marshalling bug gets here; the code and message
		// still say what happened.
		return st.Err()
	}
	return detailed.Err()
}

// ceilUnits formats d in whole units, rounded up.
func ceilUnits(d, unit time.Duration) string {
	return strconv.FormatInt(int64(roundUp(d, unit)/unit), 10)
}

// roundUp rounds a non-negative d up to a multiple of unit.
func roundUp(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + unit - 1) / unit * unit
}
