// Package fields is the one vocabulary every door of tollgate reports a
// decision in: the RateLimit-Policy and RateLimit fields of the IETF
// httpapi draft "RateLimit header fields for HTTP"
// (draft-ietf-httpapi-ratelimit-headers-12), as HTTP header fields and as
// gRPC and Connect metadata of the same names and values, beside the
// legacy x-ratelimit-* keys Envoy's rate limit filter uses.
package fields

import (
	"math"
	"math/bits"
	"strconv"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
)

// The draft's fields. Both are Structured Field Lists (RFC 9651) with one
// item per deciding limit, named by a String: the limit's
// engine.LimitDecision.Policy.
const (
	// Policy describes each limit: q, its quota (the most units it admits
	// at once, Limit.Capacity, or the in-flight bound), w, the window in
	// seconds (a window's Period or calendar unit; for a token bucket or
	// GCRA, the time its capacity takes to refill from empty; absent for
	// an in-flight limit) and qu="concurrent-requests" for an in-flight
	// limit.
	Policy = "RateLimit-Policy"
	// State gives each limit's state after the decision: r, the units
	// remaining, and t, the seconds until the quota is whole again
	// (rounded up; absent for an in-flight limit).
	State = "RateLimit"
	// PolicyKey and StateKey are the same fields as gRPC and Connect
	// metadata keys.
	PolicyKey = "ratelimit-policy"
	StateKey  = "ratelimit"
)

// The legacy keys, Envoy's rate limit filter's and gRPC's: they describe
// one limit, the most restrictive (Restrictive).
const (
	// LegacyLimit is the limit's capacity: the most units admitted at once.
	LegacyLimit = "x-ratelimit-limit"
	// LegacyRemaining is how many units are left after the decision.
	LegacyRemaining = "x-ratelimit-remaining"
	// LegacyReset is how many seconds (rounded up) until the limit is
	// whole again.
	LegacyReset = "x-ratelimit-reset"
	// Replayed is "1" when the call carried a request id already admitted:
	// it was allowed again without being debited.
	Replayed = "x-ratelimit-replayed"
	// RetryAfter is, on a denial, how many seconds (rounded up) to wait
	// before the same call is admitted.
	RetryAfter = "retry-after"
	// Pushback is, on a denial, the same wait in milliseconds (rounded up):
	// grpc-go's retry policy waits exactly this long before its next
	// attempt instead of its own backoff.
	Pushback = "grpc-retry-pushback-ms"
)

// maxInteger is the largest Integer a Structured Field carries.
const maxInteger = 999_999_999_999_999

// Values returns the values of the Policy and State fields for limits,
// built in one buffer on the stack for the common one or two limits: one
// allocation, the two values sharing it. Both are "" without limits.
func Values(limits []engine.LimitDecision) (policy, state string) {
	if len(limits) == 0 {
		return "", ""
	}
	var buf [256]byte
	b := buf[:0]
	for i, ld := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, ld.Policy)
		if ld.Limit == (tollgate.Limit{}) {
			b = appendParam(b, "q", ld.MaxInFlight)
			b = append(b, `;qu="concurrent-requests"`...)
			continue
		}
		b = appendParam(b, "q", ld.Limit.Capacity())
		b = appendParam(b, "w", Seconds(window(ld.Limit, ld.Decision.At)))
	}
	n := len(b)
	for i, ld := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, ld.Policy)
		b = appendParam(b, "r", ld.Decision.Remaining)
		if ld.Limit != (tollgate.Limit{}) {
			b = appendParam(b, "t", Seconds(ld.Decision.ResetAfter))
		}
	}
	all := string(b)
	return all[:n], all[n:]
}

// window is the time in which l admits its capacity, at the time at (the
// store's, or now when the decision did not say): a window's length, or
// the time a bucket takes to refill from empty.
func window(l tollgate.Limit, at time.Time) time.Duration {
	if l.Calendar != tollgate.NoCalendar {
		if at.IsZero() {
			at = time.Now()
		}
		return l.Calendar.Length(at)
	}
	if l.Algorithm == tollgate.TokenBucket || l.Algorithm == tollgate.GCRA {
		// Capacity × Period / Rate, in 128 bits.
		hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(l.Period))
		if hi >= uint64(l.Rate) {
			return math.MaxInt64
		}
		q, _ := bits.Div64(hi, lo, uint64(l.Rate))
		return time.Duration(min(q, math.MaxInt64))
	}
	return l.Period
}

// Seconds is d in whole seconds, rounded up, as a Structured Field Integer
// (and as Retry-After takes it).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, maxInteger)
}

func appendParam(b []byte, key string, v int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, min(max(v, 0), maxInteger), 10)
}

// appendString appends s as a Structured Field String, or, when s has
// characters a String cannot carry (outside printable ASCII), as a Display
// String (RFC 9651, 3.3.8): %"…" with its UTF-8 bytes percent-encoded.
func appendString(b []byte, s string) []byte {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			ascii = false
			break
		}
	}
	if ascii {
		b = append(b, '"')
		for i := 0; i < len(s); i++ {
			if s[i] == '"' || s[i] == '\\' {
				b = append(b, '\\')
			}
			b = append(b, s[i])
		}
		return append(b, '"')
	}
	const hex = "0123456789abcdef"
	b = append(b, `%"`...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' || c == '"' {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// Restrictive returns the limit the legacy keys describe: the denying one
// with the longest wait, else the one with the fewest units left; and
// false without limits.
func Restrictive(limits []engine.LimitDecision) (engine.LimitDecision, bool) {
	best := -1
	for i, ld := range limits {
		switch {
		case best < 0:
			best = i
		case ld.Denied != limits[best].Denied:
			if ld.Denied {
				best = i
			}
		case ld.Denied:
			if ld.Decision.RetryAfter > limits[best].Decision.RetryAfter {
				best = i
			}
		case ld.Decision.Remaining < limits[best].Decision.Remaining:
			best = i
		}
	}
	if best < 0 {
		return engine.LimitDecision{}, false
	}
	return limits[best], true
}

// Trailer returns the rate-limit metadata an RPC door (gRPC, Connect) sends
// in the trailers of a call whose limits are limits, as set calls set(key,
// value) once per key: nothing without limits; for an admitted call
// (refused false) only the replay mark unless all; otherwise the draft's
// fields, the legacy keys of the most restrictive limit and, for a denial
// (wait > 0 or denied), retry-after and grpc-retry-pushback-ms.
func Trailer(limits []engine.LimitDecision, refused, denied, all bool, wait time.Duration, set func(key, value string)) {
	if len(limits) == 0 {
		return
	}
	replayed := false
	for _, ld := range limits {
		replayed = replayed || ld.Decision.Replayed
	}
	if !refused && !all {
		if replayed {
			set(Replayed, "1")
		}
		return
	}
	policy, state := Values(limits)
	set(PolicyKey, policy)
	set(StateKey, state)
	r, _ := Restrictive(limits)
	capacity := r.MaxInFlight
	if r.Limit != (tollgate.Limit{}) {
		capacity = r.Limit.Capacity()
	}
	set(LegacyLimit, strconv.FormatInt(capacity, 10))
	set(LegacyRemaining, strconv.FormatInt(r.Decision.Remaining, 10))
	set(LegacyReset, strconv.FormatInt(Seconds(r.Decision.ResetAfter), 10))
	if replayed {
		set(Replayed, "1")
	}
	if denied {
		set(RetryAfter, strconv.FormatInt(Seconds(wait), 10))
		set(Pushback, strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
	}
}
