// Package tollgate is the vocabulary of a distributed rate limiter for
// servers of many replicas (gRPC, Connect, net/http): a Limit says how much
// is admitted, a Request asks for a decision, a Store makes it and answers
// with a Decision.
//
// Two stores implement Store: store.Redis, which makes every decision with
// one short Lua script on Redis (single node, Cluster or Sentinel) so that
// many replicas share one quota, and store.Memory, an in-process store with
// the same answers. Package engine decides calls by rules over a Store,
// for three doors: package interceptor (gRPC), package httplimit
// (net/http) and the connectlimit module (connect-go).
//
// Time is always the store's: the Redis store reads the Redis server clock
// inside the script, never the caller's clock. Quantities are integers:
// time in whole microseconds (GCRA keeps an arrival time's fraction of a
// microsecond in 1/Rate units) and tokens in whole units, so nothing drifts.
package tollgate

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Algorithm selects how a Limit is enforced.
type Algorithm uint8

const (
	// TokenBucket holds up to Burst tokens and refills Rate tokens every
	// Period, continuously. A request of Cost n takes n tokens or is denied.
	TokenBucket Algorithm = iota
	// GCRA is the generic cell rate algorithm with the meaning of Rate,
	// Period and Burst used by github.com/go-redis/redis_rate: one request
	// every Period/Rate on average, up to Burst at once. Its state is the
	// theoretical arrival time, kept exactly (whole microseconds plus a
	// fraction in 1/Rate units), so admissions are exact to the microsecond
	// where redis_rate's floats round by up to half an interval.
	GCRA
	// SlidingWindow admits up to Rate per Period, estimating the count in the
	// last Period as (previous window's count × fraction of it still
	// overlapping) + current window's count. Burst is ignored.
	SlidingWindow
	// FixedWindow admits up to Rate per window of length Period, windows
	// aligned to the store's clock (multiples of Period since the Unix
	// epoch), or per calendar day, week, month or year (Limit.Calendar).
	// Burst is ignored.
	FixedWindow
)

// String returns the algorithm's lower-case name as used in metrics and
// spans: "token_bucket", "gcra", "sliding_window" or "fixed_window".
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case GCRA:
		return "gcra"
	case SlidingWindow:
		return "sliding_window"
	case FixedWindow:
		return "fixed_window"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// MaxPeriod is the longest Period a Limit may have: 366 days, so that a
// yearly quota of any year fits (calendar windows, see Calendar, are not
// bounded by it).
const MaxPeriod = 366 * 24 * time.Hour

// MaxRate is the largest Rate and the largest Burst a Limit may have: 10^12.
const MaxRate = 1_000_000_000_000

// MaxRefill bounds the time a TokenBucket or GCRA limit takes to go from
// empty to full, Capacity × Period / Rate: 100 years (of 365.25 days). A
// longer refill means a burst no rate will ever give back.
const MaxRefill = 36525 * 24 * time.Hour

// Limit says how many events are admitted over time for one identity.
//
// Every size within the bounds is enforced exactly, to the microsecond and
// to the unit: Rate and Burst up to MaxRate, Period from 1ms to MaxPeriod,
// and a refill time (Capacity × Period / Rate) up to MaxRefill, on every
// store. Admissions equal the arithmetic, and RetryAfter and ResetAfter are
// exact in whole microseconds (docs/limits.md shows how, on Redis's doubles).
type Limit struct {
	// Algorithm chooses the enforcement; the zero value is TokenBucket.
	Algorithm Algorithm
	// Rate is the number of events admitted per Period: 1 to MaxRate.
	Rate int64
	// Period is the time over which Rate events are admitted. It must be at
	// least 1ms and at most MaxPeriod, or zero with a Calendar; it is used
	// at microsecond precision.
	Period time.Duration
	// Burst is the capacity for TokenBucket and GCRA: the most that can be
	// admitted at once after a quiet period, at most MaxRate. 0 means Rate.
	// Windows ignore it.
	Burst int64
	// Calendar, when set, makes a FixedWindow's windows calendar days, ISO
	// weeks, months or years in UTC on the store's clock; Period must then be
	// zero. The zero value means windows of length Period.
	Calendar Calendar
}

// Calendar names a calendar unit for FixedWindow limits whose windows start
// at calendar boundaries (UTC, on the store's clock) instead of multiples of
// Period since the Unix epoch.
type Calendar uint8

const (
	// NoCalendar is the zero value: windows are Period long.
	NoCalendar Calendar = iota
	// Day windows start at 00:00 UTC.
	Day
	// Week windows start on Monday at 00:00 UTC (ISO weeks).
	Week
	// Month windows start on the 1st at 00:00 UTC, whatever the month's length.
	Month
	// Year windows start on 1 January at 00:00 UTC.
	Year
)

// String returns the calendar's adjective as used in descriptions:
// "daily", "weekly", "monthly", "yearly", or "" for NoCalendar.
func (c Calendar) String() string {
	switch c {
	case NoCalendar:
		return ""
	case Day:
		return "daily"
	case Week:
		return "weekly"
	case Month:
		return "monthly"
	case Year:
		return "yearly"
	}
	return fmt.Sprintf("calendar(%d)", uint8(c))
}

// Length returns the length of the window of c that holds t, in UTC: 24h
// for a Day, 7 days for a Week, 28 to 31 days for a Month and 365 or 366
// for a Year; 0 for NoCalendar. It is the one place every package reads a
// calendar unit's length from.
func (c Calendar) Length(t time.Time) time.Duration {
	y, m, _ := t.UTC().Date()
	switch c {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		start := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start.AddDate(0, 1, 0).Sub(start)
	case Year:
		start := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
		return start.AddDate(1, 0, 0).Sub(start)
	}
	return 0
}

// Daily returns a FixedWindow Limit of n events per UTC calendar day.
func Daily(n int64) Limit { return Limit{Algorithm: FixedWindow, Rate: n, Calendar: Day} }

// Weekly returns a FixedWindow Limit of n events per ISO week (from Monday 00:00 UTC).
func Weekly(n int64) Limit { return Limit{Algorithm: FixedWindow, Rate: n, Calendar: Week} }

// Monthly returns a FixedWindow Limit of n events per calendar month (from the 1st, 00:00 UTC).
func Monthly(n int64) Limit { return Limit{Algorithm: FixedWindow, Rate: n, Calendar: Month} }

// Yearly returns a FixedWindow Limit of n events per calendar year (from 1 January, 00:00 UTC).
func Yearly(n int64) Limit { return Limit{Algorithm: FixedWindow, Rate: n, Calendar: Year} }

// PerSecond returns a TokenBucket Limit of n events per second with a burst of n.
func PerSecond(n int64) Limit {
	return Limit{Algorithm: TokenBucket, Rate: n, Period: time.Second, Burst: n}
}

// PerMinute returns a TokenBucket Limit of n events per minute with a burst of n.
func PerMinute(n int64) Limit {
	return Limit{Algorithm: TokenBucket, Rate: n, Period: time.Minute, Burst: n}
}

// PerHour returns a TokenBucket Limit of n events per hour with a burst of n.
func PerHour(n int64) Limit {
	return Limit{Algorithm: TokenBucket, Rate: n, Period: time.Hour, Burst: n}
}

// Capacity is the largest Cost a single request may have under this Limit:
// Burst (or Rate when Burst is 0) for TokenBucket and GCRA, Rate for the
// windows.
func (l Limit) Capacity() int64 {
	if (l.Algorithm == TokenBucket || l.Algorithm == GCRA) && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// String describes the limit, for example "token_bucket 100/1s burst 100",
// "fixed_window 10/1m0s" or, for a calendar window, "monthly 1000000".
func (l Limit) String() string {
	switch {
	case l.Calendar != NoCalendar:
		return fmt.Sprintf("%s %d", l.Calendar, l.Rate)
	case l.Algorithm == TokenBucket || l.Algorithm == GCRA:
		return fmt.Sprintf("%s %d/%s burst %d", l.Algorithm, l.Rate, l.Period, l.Capacity())
	}
	return fmt.Sprintf("%s %d/%s", l.Algorithm, l.Rate, l.Period)
}

// Validate reports whether the limit can be enforced: the bounds above
// (MaxRate, MaxPeriod, MaxRefill), and a Calendar only on a FixedWindow
// with no Period. Every error it returns wraps ErrInvalidRequest and names
// the bound.
func (l Limit) Validate() error {
	switch {
	case l.Algorithm > FixedWindow:
		return invalid("unknown algorithm %d", uint8(l.Algorithm))
	case l.Rate <= 0:
		return invalid("rate must be > 0, got %d", l.Rate)
	case l.Rate > MaxRate:
		return invalid("rate must be at most MaxRate (10^12), got %d", l.Rate)
	case l.Burst < 0:
		return invalid("burst must be >= 0, got %d", l.Burst)
	case l.Burst > MaxRate:
		return invalid("burst must be at most MaxRate (10^12), got %d", l.Burst)
	case l.Calendar > Year:
		return invalid("unknown calendar %d", uint8(l.Calendar))
	case l.Calendar != NoCalendar && l.Algorithm != FixedWindow:
		return invalid("a %s calendar window needs the fixed_window algorithm, got %s", l.Calendar, l.Algorithm)
	case l.Calendar != NoCalendar && l.Period != 0:
		return invalid("a %s calendar window takes its length from the calendar: period must be 0, got %s", l.Calendar, l.Period)
	case l.Calendar != NoCalendar:
		return nil
	case l.Period < time.Millisecond:
		return invalid("period must be at least 1ms, got %s", l.Period)
	case l.Period > MaxPeriod:
		return invalid("period must be at most MaxPeriod (366 days), got %s", l.Period)
	}
	if (l.Algorithm == TokenBucket || l.Algorithm == GCRA) && l.refillTooLong() {
		return invalid("%s takes more than MaxRefill (100 years) to refill from empty: burst × period / rate must be at most that", l)
	}
	return nil
}

// refillTooLong reports whether ⌈Capacity × Period / Rate⌉ µs, the time to
// refill from empty, exceeds MaxRefill: exactly, in 128 bits.
func (l Limit) refillTooLong() bool {
	hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(l.Period.Microseconds()))
	rate := uint64(l.Rate)
	if hi >= rate { // the quotient does not even fit 64 bits
		return true
	}
	q, r := bits.Div64(hi, lo, rate)
	if r > 0 {
		q++
	}
	return q > uint64(MaxRefill.Microseconds())
}

// MaxKeyLen is the longest Request.Key a store accepts (64 KiB). Longer
// identities are an attack or a bug, not an identity.
const MaxKeyLen = 64 << 10

// MaxRequestIDLen is the longest Request.RequestID a store accepts.
const MaxRequestIDLen = 128

// Request asks a Store for one decision.
type Request struct {
	// Key is the identity of the bucket, any bytes up to MaxKeyLen; the store
	// makes it safe for Redis. Requests with the same Key and Algorithm share
	// state, so give each rule its own key space (the engine prefixes
	// keys with the rule name).
	Key string
	// Limit is the limit enforced for this Key.
	Limit Limit
	// Cost is how many units the request takes; 0 means 1. It must not exceed
	// Limit.Capacity() (MaxRate with Overdraw).
	Cost int64
	// RequestID is optional. Retries that carry the same id for the same Key
	// are not debited twice: once a request with this id has been admitted,
	// later ones replay as Allowed and Replayed without a debit, a bounded
	// number of times within a bounded period (store options). A denied
	// request leaves no trace, so its retry is judged afresh. At most
	// MaxRequestIDLen bytes of printable ASCII.
	RequestID string
	// ReplayTTL, when > 0, shortens how long the store remembers RequestID
	// after an admission (never beyond the store's replay TTL; the stores
	// round it up to a tenth of a second). A retry cannot outlive its call,
	// so callers that know the call's deadline set it to the time left plus
	// a small margin.
	ReplayTTL time.Duration
	// Overdraw debits Cost even when it does not fit: the identity goes into
	// debt, as a Settle past empty does, and the Decision still reports
	// whether it fitted (Allowed) and what is left. It counts hits after the
	// fact, as Envoy's apply_on_stream_done sends them. In AllowAll, every
	// request of the set or none has it; such a set is debited whole.
	Overdraw bool
}

// Validate reports whether a store can decide the request: a valid Limit,
// a Cost of 0 (meaning 1) up to Limit.Capacity() (MaxRate with Overdraw), a
// Key of at most MaxKeyLen bytes and a RequestID of at most MaxRequestIDLen
// bytes of printable ASCII (0x21 to 0x7e; empty for none). Every error it
// returns wraps ErrInvalidRequest.
func (r Request) Validate() error {
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	switch {
	case cost < 0:
		return invalid("cost must be > 0, got %d", cost)
	case r.Overdraw && cost > MaxRate:
		return invalid("cost must be at most MaxRate (10^12), got %d", cost)
	case !r.Overdraw && cost > r.Limit.Capacity():
		return invalid("cost %d exceeds the capacity %d of %s: it could never be admitted", cost, r.Limit.Capacity(), r.Limit)
	case len(r.Key) > MaxKeyLen:
		return invalid("key is %d bytes, more than %d", len(r.Key), MaxKeyLen)
	}
	return validRequestID(r.RequestID)
}

// validRequestID reports whether id can be a RequestID (see
// Request.Validate).
func validRequestID(id string) error {
	if len(id) > MaxRequestIDLen {
		return invalid("request id is %d bytes, more than %d", len(id), MaxRequestIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return invalid("request id has byte 0x%02x at %d: only printable ASCII without spaces is allowed", c, i)
		}
	}
	return nil
}

// Decision is a store's answer to one Request.
type Decision struct {
	// Allowed reports whether the request is admitted.
	Allowed bool
	// Remaining is how many units are left after this decision: the largest
	// Cost that would be admitted right now. It is never below 0.
	Remaining int64
	// RetryAfter is, when denied, how long to wait until the same Cost is
	// admitted if nobody else consumes in between. It is 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the identity is back to its full
	// capacity (a full bucket, an empty window) if nothing else is consumed.
	ResetAfter time.Duration
	// Replayed reports that a request with the same RequestID was admitted
	// earlier: this one is allowed again without being debited.
	Replayed bool
	// Debt is how many units the identity owes past empty, after a
	// settlement or an overdraw took more than it had (Settler.Settle,
	// Request.Overdraw): its Remaining is 0 until the refill has paid them.
	// Settle and Peek report it; other answers report 0.
	Debt int64
	// At is the store's clock when it decided, when the answer came from
	// the store's state (zero when it came from a cache): Settle gives a
	// window back only while the window of At is stored.
	At time.Time
}

// Store makes rate-limit decisions. Implementations are safe for concurrent
// use. Allow returns an error wrapping ErrInvalidRequest for a request that
// can never be decided (see Request.Validate); any other error means the
// store could not decide (unreachable, timed out) and the caller's fail
// policy applies.
type Store interface {
	// Allow decides one request and debits it when admitted.
	Allow(ctx context.Context, req Request) (Decision, error)
	// AllowAll decides a set of requests all or nothing: it returns one
	// Decision per request, in order, and either every request is admitted
	// and debited, or none is debited and every Decision has Allowed false
	// (those that would have been admitted have RetryAfter 0). Requests are
	// judged in order, each seeing the debits of earlier ones on the same Key
	// and Algorithm. The set holds 1 to MaxAllowAll requests, all with the
	// same RequestID or none; a set admitted under an id replays as a whole.
	AllowAll(ctx context.Context, reqs []Request) ([]Decision, error)
	// Peek reports what Allow would answer for req now, without debiting
	// and without recording its RequestID.
	Peek(ctx context.Context, req Request) (Decision, error)
	// Reset forgets the state of req's Key under req's Limit.Algorithm: the
	// identity is back to a full bucket or an empty window.
	Reset(ctx context.Context, req Request) error
}

// Admission is what a settlement needs of an admitted request's Decision
// (see Decision.Admission): when the store decided, and how far from full
// it left the identity. The zero Admission is an admission nobody kept: a
// settlement counts it as made now, from an empty bucket.
type Admission struct {
	// At is the store's clock when it admitted (Decision.At); zero for
	// unknown.
	At time.Time
	// ResetAfter is the admission's Decision.ResetAfter: how far from full
	// it left a bucket. Windows do not read it.
	ResetAfter time.Duration
}

// Admission returns what a settlement of the request d admitted needs of
// d: its At and ResetAfter.
func (d Decision) Admission() Admission { return Admission{At: d.At, ResetAfter: d.ResetAfter} }

// Settler is a Store that also settles: it makes the cost of a request it
// admitted final once the call has ended, giving back what the call did
// not use or debiting what it used beyond. store.Memory, store.Redis,
// lease.Store and rlqs.Client implement it.
type Settler interface {
	Store
	// Settle makes cost, 0 to MaxRate, the final cost of req, a request
	// the store admitted, as admitted says (see Admission; its zero value
	// means an admission nobody kept: as if now, from an empty bucket). A
	// smaller cost gives the difference back, never creating quota that
	// was not debited: a bucket never above its capacity (less any refill
	// it could have lost to it since), a window only while the window
	// debited is stored. A larger one debits the rest even past empty: the
	// identity is in debt, with Remaining 0, until the refill has paid it
	// back. The Decision says whether a request of req.Cost would be
	// admitted now (and when, RetryAfter, if not), and the units available
	// now.
	//
	// With a RequestID a settlement is idempotent for the store's replay
	// TTL: settling the id again applies only the difference from the cost
	// it was last settled at. Without one, a settle whose reply is lost is
	// an error and may have been applied once; the store never applies it
	// twice, and the caller must not resend it. The store cannot tell
	// whether req was really admitted: settling a denied request debits
	// what it was never given.
	Settle(ctx context.Context, req Request, admitted Admission, cost int64) (Decision, error)
	// SettleAll settles a set AllowAll admitted, reqs[i] with admitted[i]
	// at costs[i], as Settle does, in one step where the set was decided in
	// one.
	SettleAll(ctx context.Context, reqs []Request, admitted []Admission, costs []int64) ([]Decision, error)
}

// InProcess is a Store that decides in this process without waiting on a
// network, so callers give its calls no deadline of their own (a context
// and a timer per call would be pure cost). store.Memory and rlqs.Client
// implement it; lease.Store reports its inner store's answer.
type InProcess interface {
	Store
	// DecidesInProcess reports whether every decision is made in process.
	DecidesInProcess() bool
}

// MaxAllowAll is the most requests one Store.AllowAll call decides.
const MaxAllowAll = 64

// ErrInvalidRequest is wrapped by every validation error: a bad Limit, a bad
// Cost, an oversized Key or a malformed RequestID. errors.Is works.
var ErrInvalidRequest = errors.New("tollgate: invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}
