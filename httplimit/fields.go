package httplimit

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/partkey"
)

// The fields of draft-ietf-httpapi-ratelimit-headers-12. Both are
// Structured Field Lists (RFC 9651) with one item per limit that decided
// the request, named by a String: the rule's name, followed for a rule
// with several limits by "/" and the limit's period or calendar unit
// ("per-tenant/1s", "per-tenant/daily") or "/in-flight".
const (
	// FieldPolicy describes each limit: q, its quota (the most units it
	// admits at once, Limit.Capacity, or Rule.MaxInFlight), w, the window
	// in seconds (a window's Period; for a token bucket or GCRA, the time
	// its capacity takes to refill from empty; absent for an in-flight
	// limit) and qu="concurrent-requests" for an in-flight limit.
	FieldPolicy = "RateLimit-Policy"
	// FieldRateLimit gives each limit's state after the request: r, the
	// units remaining (Decision.Remaining), and t, the seconds until the
	// quota is whole again (Decision.ResetAfter, rounded up; absent for an
	// in-flight limit).
	FieldRateLimit = "RateLimit"
)

// maxSFInteger is the largest Integer a Structured Field carries.
const maxSFInteger = 999_999_999_999_999

// setFields sets the RateLimit-Policy and RateLimit fields of limits on h.
// Both are built in one buffer on the stack for the common one or two
// limits, and set under their canonical keys with one slice: three
// allocations (BenchmarkMiddleware).
func setFields(h http.Header, limits []engine.LimitDecision) {
	if len(limits) == 0 {
		return
	}
	var buf [256]byte
	b := buf[:0]
	for i, ld := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, policyName(limits, i))
		if ld.Limit == (tollgate.Limit{}) {
			b = appendParam(b, "q", ld.MaxInFlight)
			b = append(b, `;qu="concurrent-requests"`...)
			continue
		}
		b = appendParam(b, "q", ld.Limit.Capacity())
		b = appendParam(b, "w", seconds(window(ld.Limit)))
	}
	policy := len(b)
	for i, ld := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, policyName(limits, i))
		b = appendParam(b, "r", ld.Decision.Remaining)
		if ld.Limit != (tollgate.Limit{}) {
			b = appendParam(b, "t", seconds(ld.Decision.ResetAfter))
		}
	}
	all := string(b)
	vals := []string{all[:policy], all[policy:]}
	h[canonicalPolicy], h[canonicalRateLimit] = vals[0:1:1], vals[1:2:2]
}

// The fields' keys as http.Header keeps them.
var (
	canonicalPolicy    = http.CanonicalHeaderKey(FieldPolicy)
	canonicalRateLimit = http.CanonicalHeaderKey(FieldRateLimit)
)

// policyName names limits[i]: its rule, with the limit's part when the
// rule decided several limits of the request.
func policyName(limits []engine.LimitDecision, i int) string {
	ld := limits[i]
	n := 0
	for _, o := range limits {
		if o.Rule == ld.Rule {
			n++
		}
	}
	if n == 1 {
		return ld.Rule
	}
	if ld.Limit == (tollgate.Limit{}) {
		return ld.Rule + "/in-flight"
	}
	part := partkey.ForLimit(ld.Limit)
	for j, o := range limits {
		if j != i && o.Rule == ld.Rule && o.Limit != (tollgate.Limit{}) && partkey.ForLimit(o.Limit) == part {
			// Two limits of one period, of different algorithms.
			return ld.Rule + "/" + part + "/" + ld.Limit.Algorithm.String()
		}
	}
	return ld.Rule + "/" + part
}

// window is the time in which l admits its capacity: a window's length,
// or the time a bucket takes to refill from empty.
func window(l tollgate.Limit) time.Duration {
	switch l.Calendar {
	case tollgate.Day:
		return 24 * time.Hour
	case tollgate.Week:
		return 7 * 24 * time.Hour
	case tollgate.Month:
		return 31 * 24 * time.Hour // the longest month
	case tollgate.Year:
		return 366 * 24 * time.Hour
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

// seconds is d in whole seconds, rounded up, as a Structured Field Integer.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, maxSFInteger)
}

func appendParam(b []byte, key string, v int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, min(max(v, 0), maxSFInteger), 10)
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
