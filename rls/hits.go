package rls

import (
	"math"
)

// HitCounts is one limited descriptor's hits in one request, as
// envoyproxy/ratelimit counts them in its statistics
// (ratelimit.service.rate_limit.KEY.total_hits and the others).
type HitCounts struct {
	// Key names the descriptor as that project's statistics do: the
	// domain, then each level's key or key_value, joined by dots; with
	// detailed_metric, the request's own keys and values.
	Key string
	// Total is every hit; WithinLimit the hits of an admitted request;
	// NearLimit those above the near-limit threshold and within the limit;
	// OverLimit those past the limit; ShadowMode the hits past the limit of
	// a shadow-mode descriptor.
	Total, WithinLimit, NearLimit, OverLimit, ShadowMode uint64
}

// hitCounter splits a request's hits for Options.HitCounts.
type hitCounter struct {
	ratio  float32
	record func(HitCounts)
}

// count records the checks' hits.
func (h *hitCounter) count(checks []check) {
	for i := range checks {
		c := &checks[i]
		switch c.kind {
		case kindNone, kindUnlimited, kindPeek, kindRefund:
			continue
		}
		if hc, ok := h.split(c); ok {
			h.record(hc)
		}
	}
}

// split returns c's hits on the limit its status shows, with the counts
// before and after the request as envoyproxy/ratelimit's counter holds
// them (limitBeforeIncrease, limitAfterIncrease in its base limiter).
func (h *hitCounter) split(c *check) (HitCounts, bool) {
	if len(c.reqs) == 0 {
		return HitCounts{}, false
	}
	i := c.shown()
	req := c.reqs[i]
	hits := uint64(max(req.Cost, 0))
	hc := HitCounts{Key: c.metric, Total: hits}
	limit := uint64(req.Limit.Rate)
	var after uint64
	switch {
	case c.kind == kindDenied:
		after = limit + hits // nothing is ever admitted: every hit is over
	case !c.decided:
		return hc, true // the store did not decide: only the hits are known
	default:
		d := c.decs[i]
		used := uint64(max(req.Limit.Capacity()-d.Remaining, 0))
		switch {
		case d.Debt > 0:
			after = limit + uint64(d.Debt)
		case d.Allowed:
			after = used
		default: // refused, not debited: where the count would have gone
			after = used + hits
		}
	}
	before := after - min(after, hits)
	near := uint64(math.Floor(float64(float32(limit) * h.ratio)))
	if after > limit {
		over := after - limit
		if before >= limit {
			over = hits
		} else {
			hc.NearLimit = limit - max(near, before)
		}
		hc.OverLimit = over
		if c.rule.shadow {
			hc.ShadowMode = over
		}
		return hc, true
	}
	hc.WithinLimit = hits
	if after > near {
		hc.NearLimit = after - near
		if before >= near {
			hc.NearLimit = hits
		}
	}
	return hc, true
}
