package interceptor

import (
	"context"
	"errors"
	"fmt"
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
// (WithStoreTimeout), or the circuit breaker is open (WithBreaker).
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

// String returns "open", "closed" or "local", the value of the
// tollgate.fail_mode span attribute.
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
	// identity: they share one bucket under the rule's Limit, separate from
	// every identified caller's bucket.
	ShareMissing
)

// DefaultMaxShapeWait is the longest a Shape rule holds one message back
// when MaxShapeWait is 0.
const DefaultMaxShapeWait = 5 * time.Second

// MaxRuleNameLen is the longest Rule.Name New accepts, in bytes.
const MaxRuleNameLen = 128

// Rule limits the calls to some methods, per identity.
type Rule struct {
	// Name identifies the rule in spans, metrics and errors, and keeps its
	// buckets apart from every other rule's. It must be unique within a
	// Limiter, at most MaxRuleNameLen bytes of UTF-8, without control
	// characters.
	Name string
	// Methods are the full method names the rule applies to, either exact
	// ("/pkg.Service/Method") or a whole service ("/pkg.Service/*"). Empty
	// means every method. A call is judged by the first rule, in WithRules
	// order, that matches it.
	Methods []string
	// Key returns who is being limited: calls with the same key share one
	// bucket. It is required. New wraps it with keyfunc.Checked, so an empty
	// value counts as missing and one longer than keyfunc.MaxValueLen as
	// invalid (codes.InvalidArgument); an error wrapping neither is a
	// server fault: a gRPC status is returned as it is, anything else as
	// codes.Internal.
	Key keyfunc.Func
	// OnMissingKey says what to do when Key returns keyfunc.ErrMissing.
	OnMissingKey MissingKeyPolicy
	// Limit is enforced for every key, unless LimitFunc is set.
	Limit tollgate.Limit
	// LimitFunc, when set, returns the limit for one key at request time
	// (tiers per tenant, for example) and Limit is ignored. It gets the Key
	// function's value, or "" for the anonymous identity of ShareMissing. Its result is
	// validated on every call; an invalid limit fails the call with
	// codes.Internal. An error that is a gRPC status is returned to the
	// client as it is; any other error becomes codes.Internal. The limiter
	// caches nothing it returns: cache in the function, bounded, if needed.
	LimitFunc func(ctx context.Context, key string) (tollgate.Limit, error)
	// Cost is how many units one call takes; 0 means 1. It must not exceed
	// the limit's capacity. Streams pay it once, when they open.
	Cost int64
	// CostFunc, when set, returns the cost of one unary call from its request
	// message, and Cost is ignored for unary calls (streams still pay Cost).
	// 0 means 1. A negative cost fails the call with codes.Internal; a cost
	// above the limit's capacity can never be admitted and fails it with
	// codes.InvalidArgument.
	CostFunc func(ctx context.Context, fullMethod string, req any) int64
	// FailMode says what happens when the store cannot decide.
	FailMode FailMode
	// LocalLimit is the per-replica cap FailLocal enforces. When nil it is
	// the rule's limit divided by WithReplicas (rounded up), which is the
	// rule's limit itself when WithReplicas is not given: with N replicas the
	// fleet then admits up to N times the limit while the store is down.
	// New checks that Cost fits it; a call whose CostFunc or LimitFunc makes
	// it too small for the call is refused as FailClosed would.
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
func compileRule(r Rule, index int, replicas int64) (*rule, error) {
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
	var limits []tollgate.Limit
	if r.LimitFunc == nil {
		if err := checkLimit(r.Limit, cost); err != nil {
			return nil, fail("Limit: %w", err)
		}
		limits = []tollgate.Limit{r.Limit}
	}
	c.call = newPlan(c, scopeCall, limits, replicas)
	if r.FailMode == FailLocal {
		for _, lp := range c.call.limits {
			if err := checkLimit(lp.local, cost); err != nil {
				return nil, fail("local limit for FailLocal: %w", err)
			}
		}
		if r.LimitFunc != nil && r.LocalLimit != nil {
			if err := checkLimit(*r.LocalLimit, cost); err != nil {
				return nil, fail("LocalLimit: %w", err)
			}
		}
	}
	if r.PerMessage != nil {
		if err := checkLimit(*r.PerMessage, 1); err != nil {
			return nil, fail("PerMessage: %w", err)
		}
		c.message = newPlan(c, scopeMessage, []tollgate.Limit{*r.PerMessage}, replicas)
		if r.FailMode == FailLocal {
			if err := checkLimit(c.message.limits[0].local, 1); err != nil {
				return nil, fail("local limit for PerMessage: %w", err)
			}
		}
	}
	return c, nil
}

// checkLimit validates l and that a request of cost fits it.
func checkLimit(l tollgate.Limit, cost int64) error {
	_, err := tollgate.Request{Limit: l, Cost: cost}.Normalized()
	return err
}

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
	case len(name) > MaxRuleNameLen:
		return fmt.Errorf("Name is %d bytes, more than %d", len(name), MaxRuleNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("Name %q is not valid UTF-8", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("Name %q has a control character", name)
	}
	return nil
}

// validatePattern accepts "/pkg.Service/Method" and "/pkg.Service/*".
func validatePattern(p string) error {
	service, method, ok := splitMethod(p)
	switch {
	case !ok:
		return fmt.Errorf("method %q is not of the form \"/pkg.Service/Method\" or \"/pkg.Service/*\"", p)
	case strings.ContainsRune(service, '*') || (method != "*" && strings.ContainsRune(method, '*')):
		return fmt.Errorf("method %q: \"*\" may only stand alone as the method name", p)
	case strings.ContainsFunc(p, unicode.IsSpace):
		return fmt.Errorf("method %q has white space", p)
	}
	return nil
}

// splitMethod splits "/service/method" into its two non-empty parts.
func splitMethod(full string) (service, method string, ok bool) {
	if len(full) < 4 || full[0] != '/' {
		return "", "", false
	}
	i := strings.IndexByte(full[1:], '/') + 1
	if i < 2 || i == len(full)-1 || strings.IndexByte(full[i+1:], '/') >= 0 {
		return "", "", false
	}
	return full[1:i], full[i+1:], true
}

// matcher finds the first rule matching a full method name with at most
// three map lookups, whatever the number of rules.
type matcher struct {
	// exact maps a full method name to the first rule matching it, which
	// may be an earlier service wildcard or catch-all rule.
	exact map[string]*rule
	// services maps "/pkg.Service/" to the first rule matching every
	// method of that service.
	services map[string]*rule
	// all is the first rule with no Methods.
	all *rule
}

// newMatcher indexes rules, in order, and rejects a rule no call could
// reach because earlier rules match everything it names.
func newMatcher(rules []*rule) (matcher, error) {
	m := matcher{exact: map[string]*rule{}, services: map[string]*rule{}}
	for _, r := range rules {
		reachable := false
		if len(r.Methods) == 0 && m.all == nil {
			m.all, reachable = r, true
		}
		for _, p := range r.Methods {
			service := p[:strings.LastIndexByte(p, '/')+1]
			switch {
			case strings.HasSuffix(p, "/*"):
				if m.services[service] == nil && m.all == nil {
					m.services[service], reachable = r, true
				}
			case m.exact[p] == nil:
				if earlier := m.services[service]; earlier != nil {
					m.exact[p] = earlier
				} else if m.all != nil {
					m.exact[p] = m.all
				} else {
					m.exact[p], reachable = r, true
				}
			}
		}
		if !reachable {
			return m, fmt.Errorf("rule %q is unreachable: earlier rules match every method it names", r.Name)
		}
	}
	return m, nil
}

// match returns the rule for fullMethod, or nil when no rule applies.
func (m *matcher) match(fullMethod string) *rule {
	if r := m.exact[fullMethod]; r != nil {
		return r
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if r := m.services[fullMethod[:i+1]]; r != nil {
			return r
		}
	}
	return m.all
}
