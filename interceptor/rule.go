package interceptor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// FailMode says what a rule does when the store cannot decide: it returned
// an error other than tollgate.ErrInvalidRequest, it passed its deadline
// (WithStoreTimeout), or the circuit breaker is open (WithBreaker). The
// zero value is FailOpen. Its String is the tollgate.fail_mode span
// attribute (telemetry.AttrFailMode).
type FailMode uint8

const (
	// FailOpen admits the call. The span and the tollgate.decisions metric
	// record it (fail mode "open", outcome "fail_open"). Pick it when
	// serving without a limit for a while is better than not serving.
	FailOpen FailMode = iota
	// FailClosed refuses the call with codes.Unavailable: the limiter, not
	// the client, is at fault, and Unavailable is the code clients retry.
	// Pick it when an unmetered call costs more than a refused one.
	FailClosed
	// FailLocal decides in process, under the rule's LocalLimit, with a
	// store private to this Limiter: each replica enforces its own cap until
	// the shared store answers again.
	FailLocal
)

// String returns "open", "closed" or "local".
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "failmode(" + strconv.Itoa(int(m)) + ")"
}

// StreamMode says what happens to a stream message that its rule's
// PerMessage limit does not admit.
type StreamMode uint8

const (
	// Police fails the receive: RecvMsg returns the same ResourceExhausted
	// status a denied call gets, and the handler normally ends the stream
	// with it.
	Police StreamMode = iota
	// Shape holds the message back: RecvMsg waits for the decision's
	// RetryAfter within the stream's context and asks again, for at most the
	// rule's MaxShapeWait in total; past that it fails as Police does.
	Shape
)

// MissingKeyPolicy says what a rule does when its Key function reports
// that the call does not carry the value it reads (keyfunc.ErrMissing).
// Neither choice lets such a call through unlimited.
type MissingKeyPolicy uint8

const (
	// RejectMissing refuses the call with codes.InvalidArgument and a
	// message naming the rule and what is missing. It is the default.
	RejectMissing MissingKeyPolicy = iota
	// ShareMissing limits every caller without the value as one anonymous
	// identity: they share one bucket under the rule's Limits, separate from
	// every identified caller's bucket.
	ShareMissing
)

// DefaultMaxShapeWait is the longest a Shape rule holds one message back
// when MaxShapeWait is 0.
const DefaultMaxShapeWait = 5 * time.Second

// maxRuleNameLen is the longest Rule.Name New accepts, in bytes.
const maxRuleNameLen = 128

// Rule limits the calls to some methods, per identity.
type Rule struct {
	// Name identifies the rule in spans, metrics and errors, and keeps its
	// buckets apart from every other rule's. It must be unique within a
	// Limiter, at most 128 bytes of UTF-8, without control
	// characters.
	Name string
	// Methods are the full method names the rule applies to, either exact
	// ("/pkg.Service/Method") or a whole service ("/pkg.Service/*"), or
	// HTTP routes as package httplimit names them ("GET /items/{id}").
	// Empty means every method. Every rule whose Methods match a call applies to
	// it, unless a rule that also matches replaces it (Replaces); the call
	// is admitted only if all of them admit it, and a denied call debits
	// none of them.
	Methods []string
	// Replaces names rules this rule replaces on the methods it matches:
	// where both match a call, only this one applies (a method's own rule
	// overriding a service-wide one, say). A replaced rule still applies
	// to the methods this one does not match. New rejects unknown names, a
	// rule replacing itself, a cycle, a replacement that shares no method
	// with the rule it names, and a rule replaced on every method it names.
	Replaces []string
	// Key returns who is being limited: calls with the same key share one
	// bucket. It is required. New wraps it with keyfunc.Checked, so an empty
	// value counts as missing and one longer than keyfunc.MaxValueLen as
	// invalid (codes.InvalidArgument); an error wrapping neither is a
	// server fault: a gRPC status is returned as it is, anything else as
	// codes.Internal.
	Key keyfunc.Func
	// OnMissingKey says what to do when Key returns keyfunc.ErrMissing.
	OnMissingKey MissingKeyPolicy
	// Limits are the rule's rate limits for every key: Fixed ones, or ones
	// chosen PerCaller. The zero value is none, for a rule with only
	// MaxInFlight; a rule needs one or the other.
	Limits Limits
	// Cost is how many units one call takes; 0 means 1. It must not exceed
	// any limit's capacity. Streams pay it once, when they open.
	Cost int64
	// MaxInFlight, when above 0, is how many calls of one identity may run
	// at once across every replica sharing the store (a stream counts from
	// its opening to its end). A call finding none of its seats free is
	// refused with codes.ResourceExhausted; one refused by the rule's rate
	// limits takes no seat, and one refused for lack of a seat debits no
	// rate. A rule may have only this, with no Limits. The store must be a
	// tollgate.SeatStore.
	MaxInFlight int64
	// SeatTimeout is how long an in-flight seat lives when its call has no
	// deadline (a unary call with one holds it until its deadline and a
	// second more), renewed every third of it while the call runs, so that a
	// replica that dies frees its seats by then. 0 means the Limiter's (WithSeatTimeout).
	SeatTimeout time.Duration
	// Settle, when set, gives the call's final cost once its handler has
	// returned (a stream's: once it has ended), with the handler's response
	// and error: the store gives back, or debits past empty, the difference
	// from what admission reserved (Cost, or CostFunc's). ok false keeps
	// the reservation. SettleReported (the cost the handler reported with
	// ReportCost) and SettleFailures (only failures cost) are ready-made. A
	// retried call carrying a request id is settled once. The call's own
	// answer never changes: a settlement the store cannot take is retried
	// for a while, then logged and dropped (the reservation stands).
	Settle func(ctx context.Context, resp any, err error) (cost int64, ok bool)
	// CostFunc, when set, returns the cost of one unary call from its request
	// message, and Cost is ignored for unary calls (streams still pay Cost).
	// 0 means 1. A negative cost fails the call with codes.Internal; a cost
	// above a limit's capacity can never be admitted and fails it with
	// codes.InvalidArgument.
	CostFunc func(ctx context.Context, fullMethod string, req any) int64
	// FailMode says what happens when the store cannot decide.
	FailMode FailMode
	// LocalLimit is the per-replica cap FailLocal enforces. When nil it is
	// each of the rule's limits divided by WithReplicas (rounded up), which
	// is the limit itself when WithReplicas is not given: with N replicas the
	// fleet then admits up to N times the limit while the store is down.
	// When set it is the one local cap, whatever the number of limits.
	// New checks that Cost fits it; a call whose CostFunc or PerCaller limits
	// make it too small for the call is refused as FailClosed would.
	LocalLimit *tollgate.Limit
	// PerMessage, when set, limits every message a client sends on a stream
	// (each RecvMsg costs 1), in a bucket per key separate from the one the
	// stream's opening pays into. Unary calls ignore it.
	PerMessage *tollgate.Limit
	// StreamMode says what happens to a message PerMessage does not admit.
	StreamMode StreamMode
	// MaxShapeWait bounds how long Shape holds one message back in total;
	// 0 means DefaultMaxShapeWait.
	MaxShapeWait time.Duration
	// Shadow decides and debits as usual but never refuses a call: a
	// denial is only recorded (outcome "shadow_denied" on the span and the
	// tollgate.decisions metric, and tollgate.shadow on the span), to see
	// whom a new rule would deny before it does. Shadow rules are decided
	// apart from the enforcing ones, after them and only for calls they
	// admit, so a shadow denial never blocks or undoes another rule's debit.
	Shadow bool
}

// clone returns r with nothing shared: its slices and the limits it points
// to are copied.
func (r Rule) clone() Rule {
	r.Methods, r.Replaces, r.Limits = slices.Clone(r.Methods), slices.Clone(r.Replaces), r.Limits.clone()
	if r.LocalLimit != nil {
		l := *r.LocalLimit
		r.LocalLimit = &l
	}
	if r.PerMessage != nil {
		l := *r.PerMessage
		r.PerMessage = &l
	}
	return r
}

// rule is a validated Rule with the plans its decisions follow.
type rule struct {
	Rule
	index        int
	maxShapeWait time.Duration
	// call decides calls and stream openings; message decides stream
	// messages and is nil without PerMessage.
	call, message *plan
}

// compileRule validates r and precomputes what the hot path needs. replicas
// is WithReplicas' value.
func compileRule(r Rule, index int, replicas int64, seatTimeout time.Duration) (*rule, error) {
	if err := validateName(r.Name); err != nil {
		return nil, fmt.Errorf("rule %d: %w", index, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("rule %q: "+format, append([]any{r.Name}, args...)...)
	}
	if r.Key == nil {
		return nil, fail("Key is nil: every rule needs a key function (keyfunc.Method() limits all callers together)")
	}
	for _, m := range r.Methods {
		if err := validatePattern(m); err != nil {
			return nil, fail("%w", err)
		}
	}
	if r.OnMissingKey > ShareMissing {
		return nil, fail("unknown OnMissingKey policy %d", r.OnMissingKey)
	}
	if r.FailMode > FailLocal {
		return nil, fail("unknown FailMode %d", r.FailMode)
	}
	if r.StreamMode > Shape {
		return nil, fail("unknown StreamMode %d", r.StreamMode)
	}
	if r.Cost < 0 {
		return nil, fail("Cost must be >= 0, got %d", r.Cost)
	}
	if r.MaxShapeWait < 0 {
		return nil, fail("MaxShapeWait must be >= 0, got %s", r.MaxShapeWait)
	}
	cost := max(r.Cost, 1)
	c := &rule{Rule: r, index: index, maxShapeWait: r.MaxShapeWait}
	if c.maxShapeWait == 0 {
		c.maxShapeWait = DefaultMaxShapeWait
	}
	flight, err := newInFlight(r, seatTimeout, replicas)
	if err != nil {
		return nil, fail("%w", err)
	}
	limits, choose, err := r.limitSource(cost, flight != nil)
	if err != nil {
		return nil, fail("%w", err)
	}
	if r.Settle != nil && limits == nil && choose.fn == nil {
		return nil, fail("Settle needs a rate limit to settle (Limits): MaxInFlight's seats are not settled")
	}
	c.call = newPlan(c, scopeCall, limits, choose, replicas)
	c.call.inFlight = flight
	if r.FailMode == FailLocal {
		for _, lp := range c.call.limits {
			if err := checkLimit(lp.local, cost); err != nil {
				return nil, fail("local limit for FailLocal: %w", err)
			}
		}
		if limits == nil && r.LocalLimit != nil {
			if err := checkLimit(*r.LocalLimit, cost); err != nil {
				return nil, fail("LocalLimit: %w", err)
			}
		}
	}
	if r.PerMessage != nil {
		if err := checkLimit(*r.PerMessage, 1); err != nil {
			return nil, fail("PerMessage: %w", err)
		}
		c.message = newPlan(c, scopeMessage, []tollgate.Limit{*r.PerMessage}, limitChooser{}, replicas)
		if r.FailMode == FailLocal {
			if err := checkLimit(c.message.limits[0].local, 1); err != nil {
				return nil, fail("local limit for PerMessage: %w", err)
			}
		}
	}
	return c, nil
}

// limitChooser is a rule's function choosing limits per identity
// (PerCaller), with the name errors give it; fn is nil for fixed limits.
type limitChooser struct {
	name string
	fn   func(ctx context.Context, key string) ([]tollgate.Limit, error)
}

// limitSource compiles r's Limits into fixed limits, each admitting cost,
// or a chooser.
func (r *Rule) limitSource(cost int64, inFlight bool) ([]tollgate.Limit, limitChooser, error) {
	ls := r.Limits
	switch ls.kind {
	case limitsPerCaller:
		if ls.perCaller == nil {
			return nil, limitChooser{}, errors.New("Limits: PerCaller's function is nil")
		}
		return nil, limitChooser{name: "PerCaller", fn: ls.perCaller}, nil
	case limitsFixed:
		if len(ls.fixed) == 0 || len(ls.fixed) > tollgate.MaxAllowAll {
			return nil, limitChooser{}, fmt.Errorf("Limits has %d limits: give 1 to %d", len(ls.fixed), tollgate.MaxAllowAll)
		}
		for i, l := range ls.fixed {
			if err := checkLimit(l, cost); err != nil {
				return nil, limitChooser{}, fmt.Errorf("Limits[%d]: %w", i, err)
			}
		}
		if err := distinctLimits(ls.fixed); err != nil {
			return nil, limitChooser{}, fmt.Errorf("Limits: %w", err)
		}
		return ls.fixed, limitChooser{}, nil
	}
	if inFlight {
		return nil, limitChooser{}, nil // an in-flight limit alone
	}
	return nil, limitChooser{}, errors.New("no limit: set Limits (Fixed or PerCaller), or MaxInFlight")
}

// distinctLimits reports an error when two limits would share one state:
// the same Algorithm and the same Period or Calendar.
func distinctLimits(limits []tollgate.Limit) error {
	for i, a := range limits {
		for j, b := range limits[:i] {
			if limitPart(a) == limitPart(b) && a.Algorithm == b.Algorithm {
				return fmt.Errorf("limits %d (%s) and %d (%s) have the same algorithm and period, so they would share one state", j, b, i, a)
			}
		}
	}
	return nil
}

// checkLimit validates l and that a request of cost fits it. The error
// still wraps tollgate.ErrInvalidRequest but does not say "invalid
// request": it is a configuration's.
func checkLimit(l tollgate.Limit, cost int64) error {
	err := tollgate.Request{Limit: l, Cost: cost}.Validate()
	if err != nil {
		return configError{err}
	}
	return nil
}

// configError is a validation error of a configured limit.
type configError struct{ err error }

func (e configError) Error() string {
	return strings.TrimPrefix(e.err.Error(), tollgate.ErrInvalidRequest.Error()+": ")
}

func (e configError) Unwrap() error { return e.err }

// localLimit is the FailLocal cap for limit: explicit when given, else
// limit with Rate and Burst divided by replicas, rounded up.
func localLimit(limit tollgate.Limit, explicit *tollgate.Limit, replicas int64) tollgate.Limit {
	if explicit != nil {
		return *explicit
	}
	if replicas <= 1 {
		return limit
	}
	limit.Rate = ceilDiv(limit.Rate, replicas)
	if limit.Burst > 0 {
		limit.Burst = ceilDiv(limit.Burst, replicas)
	}
	return limit
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func validateName(name string) error {
	switch {
	case name == "":
		return errors.New("Name is empty: every rule needs a name for its spans, metrics and keys")
	case len(name) > maxRuleNameLen:
		return fmt.Errorf("Name is %d bytes, more than %d", len(name), maxRuleNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("Name %q is not valid UTF-8", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("Name %q has a control character", name)
	}
	return nil
}
