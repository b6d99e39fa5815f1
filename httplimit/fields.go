package httplimit

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
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
func setFields(h http.Header, limits []interceptor.LimitDecision) {
	if len(limits) == 0 {
		return
	}
	var policy, state strings.Builder
	for i, ld := range limits {
		if i > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		name := policyName(limits, i)
		writeString(&policy, name)
		writeString(&state, name)
		if ld.Limit == (tollgate.Limit{}) {
			writeParam(&policy, "q", ld.MaxInFlight)
			policy.WriteString(`;qu="concurrent-requests"`)
			writeParam(&state, "r", ld.Decision.Remaining)
			continue
		}
		writeParam(&policy, "q", ld.Limit.Capacity())
		writeParam(&policy, "w", seconds(window(ld.Limit)))
		writeParam(&state, "r", ld.Decision.Remaining)
		writeParam(&state, "t", seconds(ld.Decision.ResetAfter))
	}
	h.Set(FieldPolicy, policy.String())
	h.Set(FieldRateLimit, state.String())
}

// policyName names limits[i]: its rule, with the limit's part when the
// rule decided several limits of the request.
func policyName(limits []interceptor.LimitDecision, i int) string {
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

func writeParam(b *strings.Builder, key string, v int64) {
	b.WriteByte(';')
	b.WriteString(key)
	b.WriteByte('=')
	b.WriteString(strconv.FormatInt(min(max(v, 0), maxSFInteger), 10))
}

// writeString writes s as a Structured Field String, or, when s has
// characters a String cannot carry (outside printable ASCII), as a Display
// String (RFC 9651, 3.3.8): %"…" with its UTF-8 bytes percent-encoded.
func writeString(b *strings.Builder, s string) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			ascii = false
			break
		}
	}
	if ascii {
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			if s[i] == '"' || s[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
		b.WriteByte('"')
		return
	}
	const hex = "0123456789abcdef"
	b.WriteString(`%"`)
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 || r > 0x7e || r == '%' || r == '"' {
			var buf [utf8.UTFMax]byte
			for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
				b.WriteByte('%')
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
			continue
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
}
