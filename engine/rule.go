package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// maxRuleNameLen is the longest Rule.Name New accepts, in bytes.
const maxRuleNameLen = 128

// Rule limits the calls to some methods, per identity. Its fields come in
// groups of their own types, each whose zero value is off: Limits (rates),
// InFlight (calls at once), FailMode (when the store cannot decide),
// PerMessage (stream messages). A rate rule sets Name, Key and Limits; an
// in-flight rule Name, Key and InFlight; a settled rule adds Settle.
type Rule struct {
	// Name identifies the rule in spans, metrics and errors, and keeps its
	// buckets apart from every other rule's. It must be unique within a
	// Limiter, at most 128 bytes of UTF-8, without control
	// characters.
	Name string
	// Methods are what the rule applies to: gRPC full method names or
	// Connect procedures, exact ("/pkg.Service/Method") or a whole service
	// ("/pkg.Service/*"), and HTTP routes as package httplimit names them,
	// a method and a net/http ServeMux pattern ("GET /items/{id}"). Empty
	// means every call. New refuses an entry no call of any door is ever
	// named by: a malformed pattern, or a path without its HTTP method
	// ("/v1/orders", which is "POST /v1/orders"). Every rule whose Methods
	// match a call applies to it, unless a rule that also matches replaces
	// it (Replaces); the call is admitted only if all of them admit it,
	// and a denied call debits none of them.
	Methods []string
	// Replaces names rules this rule replaces on the methods it matches:
	// where both match a call, only this one applies (a method's own rule
	// overriding a service-wide one, say). A replaced rule still applies
	// to the methods this one does not match. New rejects unknown names, a
	// rule replacing itself, a cycle, a replacement that shares no method
	// with the rule it names, and a rule replaced on every method it names.
	Replaces []string
	// Key returns who is being limited: calls with the same key share one
	// bucket. It is required; New refuses one keyfunc.Validate reports. New
	// wraps it with keyfunc.Checked, so an empty value counts as missing and
	// one longer than keyfunc.MaxValueLen as invalid: the call is refused
	// as Invalid (the caller's fault), unless ShareMissing. An error
	// wrapping neither is the rule's own fault (Fault); a door passes on a
	// status the error carries (a gRPC status, to a gRPC caller).
	Key keyfunc.Func
	// ShareMissing limits every caller whose key is missing
	// (keyfunc.ErrMissing) as one anonymous identity, in one bucket under
	// the rule's limits apart from every identified caller's. Without it
	// such a call is refused as Invalid. Neither lets it through
	// unlimited.
	ShareMissing bool
	// Limits are the rule's rate limits for every key: Fixed ones, or ones
	// chosen PerCaller. The zero value is none, for a rule with only
	// InFlight; a rule needs one or the other.
	Limits Limits
	// Cost is how many units one call takes; 0 means 1. It must not exceed
	// any limit's capacity. Streams pay it once, when they open.
	Cost int64
	// CostFunc, when set, returns the cost of one unary call from its request
	// message, and Cost is ignored for unary calls (streams still pay Cost).
	// 0 means 1. A negative cost is the rule's fault (Fault); a cost above a
	// limit's capacity can never be admitted and is refused as Invalid.
	CostFunc func(ctx context.Context, fullMethod string, req any) int64
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
	// InFlight bounds the calls of one identity running at once, with how
	// long their seats live; the zero value is no bound.
	InFlight InFlight
	// MaxInFlight is InFlight.Max written alone, as a rule with nothing but
	// a bound on the calls of one identity at once may: New takes it as
	// InFlight.Max. Setting both to different values is an error.
	MaxInFlight int64
	// FailMode says what happens when the store cannot decide, with
	// FailLocal's per-replica cap.
	FailMode FailMode
	// PerMessage limits every message a client sends on a stream. The zero
	// value is no limit.
	PerMessage MessageLimit
	// Shadow decides and debits as usual but never refuses a call: a
	// denial is only recorded (outcome "shadow_denied" on the span and the
	// tollgate.decisions metric, and tollgate.shadow on the span), to see
	// whom a new rule would deny before it does. Shadow rules are decided
	// apart from the enforcing ones, after them and only for calls they
	// admit, so a shadow denial never blocks or undoes another rule's debit.
	Shadow bool
	// Overload, when set, gives the calls this rule matches an adaptive
	// concurrency limit and a waiting room of their own, in place of the
	// server's (Config.Overload): a method that waits on a slow dependency
	// is shed by what that dependency takes, and holds none of the server's
	// seats while it waits, so the server's limit, and every other method,
	// do not come down with it. A call matched by several such rules takes
	// a seat of each, in the rules' order; a rule that replaces this one
	// where both match replaces its Overload too. A rule may have Overload
	// alone, with Name and Methods (no Key: whom a call is for is
	// Overload.Tenant's); a Shadow rule may not have it, since it never
	// refuses. docs/overload.md.
	Overload *overload.Options
}

// overloadOnly reports whether r has Overload and nothing to decide in a
// store: no rate, in-flight or message limit.
func (r *Rule) overloadOnly() bool {
	return r.Overload != nil && r.Limits.kind == limitsNone && r.InFlight.Max == 0 && r.MaxInFlight == 0 && !r.PerMessage.on()
}

// withInFlightMax returns r with MaxInFlight taken as InFlight.Max.
func (r Rule) withInFlightMax() (Rule, error) {
	switch {
	case r.MaxInFlight == 0:
	case r.InFlight.Max != 0 && r.InFlight.Max != r.MaxInFlight:
		return r, fmt.Errorf("rule %q: MaxInFlight is %d and InFlight.Max %d: set one", r.Name, r.MaxInFlight, r.InFlight.Max)
	default:
		r.InFlight.Max, r.MaxInFlight = r.MaxInFlight, 0
	}
	return r, nil
}

// clone returns r with nothing shared: its slices are copied.
func (r Rule) clone() Rule {
	r.Methods, r.Replaces, r.Limits = slices.Clone(r.Methods), slices.Clone(r.Replaces), r.Limits.clone()
	if r.Overload != nil {
		o := *r.Overload
		r.Overload = &o
	}
	return r
}

// rule is a validated Rule with the plans its decisions follow.
type rule struct {
	Rule
	index int
	// shape: a stream message this rule refuses is held back, for at most
	// maxShapeWait in total (PerMessage).
	shape        bool
	maxShapeWait time.Duration
	// call decides calls and stream openings, and is nil for a rule with
	// only Overload; message decides stream messages and is nil without
	// PerMessage.
	call, message *plan
	// admission is the rule's own overload control (Overload); nil without.
	admission *admission
}

// compileRule validates r and precomputes what the hot path needs. replicas
// is Config.Replicas.
func compileRule(r Rule, index int, replicas int64, seatTimeout time.Duration) (*rule, error) {
	if err := validateName(r.Name); err != nil {
		return nil, fmt.Errorf("rule %d: %w", index, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("rule %q: "+format, append([]any{r.Name}, args...)...)
	}
	if r.Shadow && r.Overload != nil {
		return nil, fail("Shadow and Overload: a shadow rule never refuses a call, and Overload sheds them; give the adaptive limit a rule of its own")
	}
	if r.overloadOnly() {
		return compileOverloadOnly(r, index, fail)
	}
	if r.Key == nil {
		return nil, fail("Key is nil: every rule needs a key function (keyfunc.Method() limits all callers together)")
	}
	if err := keyfunc.Validate(r.Key); err != nil {
		return nil, fail("Key: %w", err)
	}
	for _, m := range r.Methods {
		if err := validatePattern(m); err != nil {
			return nil, fail("%w", err)
		}
	}
	if r.Cost < 0 {
		return nil, fail("Cost must be >= 0, got %d", r.Cost)
	}
	cost := max(r.Cost, 1)
	c := &rule{Rule: r, index: index}
	var err error
	if c.maxShapeWait, c.shape, err = r.PerMessage.maxWait(); err != nil {
		return nil, fail("%w", err)
	}
	flight, err := newInFlight(r.InFlight, seatTimeout, replicas)
	if err != nil {
		return nil, fail("%w", err)
	}
	if flight != nil {
		flight.policy = r.Name + "/in-flight"
	}
	limits, choose, err := r.limitSource(cost, flight != nil)
	if err != nil {
		return nil, fail("%w", err)
	}
	if r.Settle != nil && limits == nil && choose.fn == nil {
		return nil, fail("Settle needs a rate limit to settle (Limits): InFlight's seats are not settled")
	}
	c.call = newPlan(c, scopeCall, limits, choose, replicas)
	c.call.inFlight = flight
	local := r.FailMode.kind == failLocal
	if local {
		for _, lp := range c.call.limits {
			if err := checkLimit(lp.local, cost); err != nil {
				return nil, fail("local limit for FailLocal: %w", err)
			}
		}
		if at, ok := r.FailMode.LocalLimit(); ok && limits == nil {
			if err := checkLimit(at, cost); err != nil {
				return nil, fail("FailLocalAt: %w", err)
			}
		}
	}
	if r.PerMessage.on() {
		perMessage := r.PerMessage.Limit
		if err := checkLimit(perMessage, 1); err != nil {
			return nil, fail("PerMessage: %w", err)
		}
		c.message = newPlan(c, scopeMessage, []tollgate.Limit{perMessage}, limitChooser{}, replicas)
		if local {
			if err := checkLimit(c.message.limits[0].local, 1); err != nil {
				return nil, fail("local limit for PerMessage: %w", err)
			}
		}
	}
	return c, nil
}

// compileOverloadOnly validates a rule with only Overload: it matches
// calls and has nothing a store decides, so the fields of store limits are
// refused rather than ignored.
func compileOverloadOnly(r Rule, index int, fail func(string, ...any) error) (*rule, error) {
	if r.Key != nil {
		if err := keyfunc.Validate(r.Key); err != nil {
			return nil, fail("Key: %w", err)
		}
	}
	for _, m := range r.Methods {
		if err := validatePattern(m); err != nil {
			return nil, fail("%w", err)
		}
	}
	switch {
	case r.Cost != 0 || r.CostFunc != nil:
		return nil, fail("Cost and CostFunc price a rate limit, and the rule has only Overload: set Limits, or drop them")
	case r.Settle != nil:
		return nil, fail("Settle needs a rate limit to settle (Limits), and the rule has only Overload")
	case r.ShareMissing:
		return nil, fail("ShareMissing shares a rate limit's bucket, and the rule has only Overload: set Limits, or drop it")
	case r.FailMode != (FailMode{}):
		return nil, fail("FailMode is what a store limit does when the store fails, and the rule has only Overload, which asks no store")
	}
	return &rule{Rule: r, index: index}, nil
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
	return nil, limitChooser{}, errors.New("no limit: set Limits (Fixed or PerCaller), or InFlight")
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
