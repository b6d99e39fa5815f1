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
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/keyfunc"
)

// FailMode says what a rule does when the store cannot decide: it returned
// an error other than tollgate.ErrInvalidRequest, it passed its deadline
// (WithStoreTimeout), or the circuit breaker is open (WithBreaker). Its
// String is the tollgate.fail_mode span attribute: "open", "closed" or
// "local". Package rls's FailMode is the same type.
type FailMode = storecall.FailMode

const (
	// FailOpen admits the call. The span and the tollgate.decisions metric
	// record it (fail mode "open", outcome "fail_open"). Pick it when
	// serving without a limit for a while is better than not serving.
	FailOpen = storecall.FailOpen
	// FailClosed refuses the call with codes.Unavailable: the limiter, not
	// the client, is at fault, and Unavailable is the code clients retry.
	// Pick it when an unmetered call costs more than a refused one.
	FailClosed = storecall.FailClosed
	// FailLocal decides in process, under the rule's LocalLimit, with a
	// store private to this Limiter: each replica enforces its own cap until
	// the shared store answers again.
	FailLocal = storecall.FailLocal
)

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
	// means every method. Every rule whose Methods match a call applies to
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
	// Limit is enforced for every key. Set exactly one of Limit, Limits,
	// LimitFunc and LimitsFunc.
	Limit tollgate.Limit
	// Limits are enforced together for every key: a call is admitted only
	// if every limit admits its cost, and a denied call debits none of them
	// ("10 per second and 10,000 per day"). Each limit has its own state;
	// two limits with the same Algorithm and Period (or Calendar) would
	// share it, so New rejects them.
	Limits []tollgate.Limit
	// LimitFunc, when set, returns the limit for one key at request time
	// (tiers per tenant, for example). It gets the Key function's value, or
	// "" for the anonymous identity of ShareMissing. Its result is
	// validated on every call; an invalid limit fails the call with
	// codes.Internal. An error that is a gRPC status is returned to the
	// client as it is; any other error becomes codes.Internal. The limiter
	// caches nothing it returns: cache in the function, bounded, if needed.
	LimitFunc func(ctx context.Context, key string) (tollgate.Limit, error)
	// LimitsFunc is LimitFunc for tiers of several limits, enforced
	// together as Limits are. It must return 1 to tollgate.MaxAllowAll
	// limits, no two with the same Algorithm and Period (or Calendar);
	// otherwise the call fails with codes.Internal.
	LimitsFunc func(ctx context.Context, key string) ([]tollgate.Limit, error)
	// Cost is how many units one call takes; 0 means 1. It must not exceed
	// any limit's capacity. Streams pay it once, when they open.
	Cost int64
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
	// Shadow decides and debits as usual but never refuses a call: a
	// denial is only recorded (outcome "shadow_denied" on the span and the
	// tollgate.decisions metric, and tollgate.shadow on the span), to see
	// whom a new rule would deny before it does. Shadow rules are decided
	// apart from the enforcing ones, after them and only for calls they
	// admit, so a shadow denial never blocks or undoes another rule's debit.
	Shadow bool
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
	set := 0
	for _, isSet := range []bool{r.Limit != (tollgate.Limit{}), r.Limits != nil, r.LimitFunc != nil, r.LimitsFunc != nil} {
		if isSet {
			set++
		}
	}
	if set > 1 {
		return nil, fail("set exactly one of Limit, Limits, LimitFunc and LimitsFunc")
	}
	limits := r.Limits
	switch {
	case r.Limits != nil:
		if len(r.Limits) == 0 || len(r.Limits) > tollgate.MaxAllowAll {
			return nil, fail("Limits has %d limits: give 1 to %d", len(r.Limits), tollgate.MaxAllowAll)
		}
		for i, l := range r.Limits {
			if err := checkLimit(l, cost); err != nil {
				return nil, fail("Limits[%d]: %w", i, err)
			}
		}
		if err := distinctLimits(r.Limits); err != nil {
			return nil, fail("Limits: %w", err)
		}
	case r.LimitFunc == nil && r.LimitsFunc == nil:
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
		c.message = newPlan(c, scopeMessage, []tollgate.Limit{*r.PerMessage}, replicas)
		if r.FailMode == FailLocal {
			if err := checkLimit(c.message.limits[0].local, 1); err != nil {
				return nil, fail("local limit for PerMessage: %w", err)
			}
		}
	}
	return c, nil
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

// ruleSet is what applies to the calls of one method: the plans of every
// matching rule that no other matching rule replaces, in WithRules order.
type ruleSet struct {
	calls []*plan
	// messages are the message plans of those rules with PerMessage.
	messages []*plan
}

// matcher finds the rules applying to a full method name with at most three
// map lookups, whatever the number of rules.
type matcher struct {
	// exact maps every full method name a rule names to its set, which
	// includes the service-wide and catch-all rules matching it.
	exact map[string]*ruleSet
	// services maps "/pkg.Service/" to the set of a method of that service
	// no rule names exactly.
	services map[string]*ruleSet
	// all is the set of a method no rule names; nil when it is empty.
	all *ruleSet
}

// pattern is one entry of Rule.Methods, or "" for a rule without Methods
// (every method).
type pattern string

// service returns "/pkg.Service/" of an exact or service pattern.
func (p pattern) service() string { return string(p[:strings.LastIndexByte(string(p), '/')+1]) }

func (p pattern) wildcard() bool { return p == "" || strings.HasSuffix(string(p), "/*") }

// covers reports whether every method q matches, p matches too.
func (p pattern) covers(q pattern) bool {
	switch {
	case p == "":
		return true
	case q == "":
		return false
	case p.wildcard():
		return p.service() == q.service()
	}
	return p == q
}

// overlaps reports whether some method matches both p and q.
func (p pattern) overlaps(q pattern) bool { return p.covers(q) || q.covers(p) }

// patterns returns r's patterns.
func (r *rule) patterns() []pattern {
	if len(r.Methods) == 0 {
		return []pattern{""}
	}
	out := make([]pattern, len(r.Methods))
	for i, m := range r.Methods {
		out[i] = pattern(m)
	}
	return out
}

// matches reports whether r applies to a method matched by q, q being an
// exact method or a service or catch-all key of the matcher.
func (r *rule) matches(q pattern) bool {
	for _, p := range r.patterns() {
		if p.covers(q) {
			return true
		}
	}
	return false
}

// newMatcher checks the rules' Replaces and indexes the rule sets.
func newMatcher(rules []*rule) (matcher, error) {
	m := matcher{exact: map[string]*ruleSet{}, services: map[string]*ruleSet{}}
	if err := checkReplaces(rules); err != nil {
		return m, err
	}
	setOf := func(q pattern) (*ruleSet, error) {
		var applying []*rule
		for _, r := range rules {
			if r.matches(q) {
				applying = append(applying, r)
			}
		}
		set := &ruleSet{}
		for _, r := range applying {
			if replacedAmong(r, applying) {
				continue
			}
			set.calls = append(set.calls, r.call)
			if r.message != nil {
				set.messages = append(set.messages, r.message)
			}
		}
		if len(set.calls) == 0 {
			return nil, nil
		}
		if err := checkSetSize(q, set); err != nil {
			return nil, err
		}
		return set, nil
	}
	var err error
	if m.all, err = setOf(""); err != nil {
		return m, err
	}
	for _, r := range rules {
		for _, p := range r.patterns() {
			if p == "" {
				continue
			}
			var set *ruleSet
			if set, err = setOf(p); err != nil {
				return m, err
			}
			if p.wildcard() {
				m.services[p.service()] = set
			} else {
				m.exact[string(p)] = set
			}
		}
	}
	return m, nil
}

// checkSetSize rejects a set whose static limits exceed what one store
// call decides.
func checkSetSize(q pattern, set *ruleSet) error {
	for _, plans := range [][]*plan{set.calls, set.messages} {
		n := 0
		for _, p := range plans {
			n += len(p.limits)
		}
		if n > tollgate.MaxAllowAll {
			what := "every method"
			if q != "" {
				what = string(q)
			}
			return fmt.Errorf("%s: its rules have %d limits together, more than the %d one decision takes", what, n, tollgate.MaxAllowAll)
		}
	}
	return nil
}

// replacedAmong reports whether a rule of applying replaces r.
func replacedAmong(r *rule, applying []*rule) bool {
	for _, o := range applying {
		if slices.Contains(o.Replaces, r.Name) {
			return true
		}
	}
	return false
}

// checkReplaces rejects Replaces whose meaning is ambiguous or void,
// naming the rules: unknown names, a rule replacing itself, cycles, a
// replacement sharing no method with the rule it names, and a rule replaced
// on every method it names (it would never apply).
func checkReplaces(rules []*rule) error {
	byName := make(map[string]*rule, len(rules))
	for _, r := range rules {
		byName[r.Name] = r
	}
	for _, r := range rules {
		for _, name := range r.Replaces {
			o := byName[name]
			switch {
			case name == r.Name:
				return fmt.Errorf("rule %q replaces itself", r.Name)
			case o == nil:
				return fmt.Errorf("rule %q replaces %q, which is not a rule", r.Name, name)
			case !anyOverlap(r.patterns(), o.patterns()):
				return fmt.Errorf("rule %q replaces %q, but no method matches both", r.Name, name)
			}
		}
	}
	// A cycle: follow Replaces depth first, with the path on a stack.
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(r *rule) error
	visit = func(r *rule) error {
		switch state[r.Name] {
		case visiting:
			i := slices.Index(path, r.Name)
			return fmt.Errorf("rules replace each other in a cycle: %s", strings.Join(quoteAll(append(path[i:], r.Name)), " replaces "))
		case done:
			return nil
		}
		state[r.Name] = visiting
		path = append(path, r.Name)
		for _, name := range r.Replaces {
			if err := visit(byName[name]); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		state[r.Name] = done
		return nil
	}
	for _, r := range rules {
		if err := visit(r); err != nil {
			return err
		}
	}
	// A rule replaced on every method it names. A wildcard can only be
	// covered by one pattern as wide (no set of exact names covers a whole
	// service), so checking each pattern against single patterns is exact.
	for _, r := range rules {
		covered := true
		for _, p := range r.patterns() {
			if !replacedOn(r, p, rules) {
				covered = false
				break
			}
		}
		if covered {
			return fmt.Errorf("rule %q never applies: rules replacing it match every method it names", r.Name)
		}
	}
	return nil
}

func anyOverlap(ps, qs []pattern) bool {
	for _, p := range ps {
		for _, q := range qs {
			if p.overlaps(q) {
				return true
			}
		}
	}
	return false
}

// replacedOn reports whether a rule replacing r matches every method p does.
func replacedOn(r *rule, p pattern, rules []*rule) bool {
	for _, o := range rules {
		if !slices.Contains(o.Replaces, r.Name) {
			continue
		}
		for _, op := range o.patterns() {
			if op.covers(p) {
				return true
			}
		}
	}
	return false
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

// match returns the set applying to fullMethod, or nil when no rule applies.
func (m *matcher) match(fullMethod string) *ruleSet {
	if set, ok := m.exact[fullMethod]; ok {
		return set
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if set, ok := m.services[fullMethod[:i+1]]; ok {
			return set
		}
	}
	return m.all
}
