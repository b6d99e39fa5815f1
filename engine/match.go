package engine

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/tollgate/tollgate"
)

// validatePattern accepts what some call of some door is named: a gRPC
// method or Connect procedure, "/pkg.Service/Method" or "/pkg.Service/*"
// (validateMethod), or an HTTP route as package httplimit names requests
// (validateRoute). Anything else would never match a call, so it is an
// error saying what to write instead.
func validatePattern(p string) error {
	if method, route, ok := strings.Cut(p, " "); ok && !strings.HasPrefix(p, "/") {
		return validateRoute(p, method, route)
	}
	return validateMethod(p)
}

// validateMethod accepts "/pkg.Service/Method" and "/pkg.Service/*": a
// service's full name (dotted identifiers) and a method name (an
// identifier). A service without a package must name itself as protobuf
// does, in UpperCamelCase, and so must its method: "/v1/orders" is an HTTP
// path, whose requests httplimit names "POST /v1/orders".
func validateMethod(p string) error {
	service, method, ok := splitMethod(p)
	path := func() error {
		return fmt.Errorf("%q is a path without its HTTP method, which no call is named by: write an HTTP route as the method and the ServeMux pattern (\"POST %s\", \"GET %s\"), a gRPC method as \"/pkg.Service/Method\" or \"/pkg.Service/*\"", p, p, p)
	}
	switch {
	case strings.ContainsFunc(p, unicode.IsSpace):
		return fmt.Errorf("method %q has white space", p)
	case !ok && strings.HasPrefix(p, "/"):
		return path()
	case !ok:
		return fmt.Errorf("method %q is neither a gRPC method (\"/pkg.Service/Method\", \"/pkg.Service/*\") nor an HTTP route (\"GET /items/{id}\")", p)
	case strings.ContainsRune(service, '*') || (method != "*" && strings.ContainsRune(method, '*')):
		return fmt.Errorf("method %q: \"*\" may only stand alone as the method name", p)
	}
	for _, part := range strings.Split(service, ".") {
		if !identifier(part) {
			return path()
		}
	}
	if method != "*" && !identifier(method) {
		return path()
	}
	if !strings.Contains(service, ".") && (!upper(service) || method != "*" && !upper(method)) {
		return path()
	}
	return nil
}

// identifier reports whether s is a protobuf identifier.
func identifier(s string) bool {
	for i, r := range s {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return s != ""
}

// upper reports whether s starts with an upper-case letter.
func upper(s string) bool { return s != "" && 'A' <= s[0] && s[0] <= 'Z' }

// validateRoute accepts an HTTP route as package httplimit names requests:
// a method in capitals and a pattern net/http's ServeMux accepts ("GET
// /items/{id}"), matched exactly. The pattern is parsed by a ServeMux, so
// that what it would refuse (a malformed wildcard, a wildcard named twice)
// is refused here rather than never matched.
func validateRoute(p, method, route string) error {
	switch {
	case method == "" || strings.ContainsFunc(method, func(r rune) bool { return r < 'A' || r > 'Z' }):
		return fmt.Errorf("route %q: an HTTP route starts with its method in capitals (GET, POST, …) and one space", p)
	case !strings.Contains(route, "/") || strings.ContainsFunc(route, unicode.IsSpace):
		return fmt.Errorf("route %q: after the method comes a ServeMux pattern with a path and no white space (\"GET /items/{id}\")", p)
	case strings.ContainsRune(route, '*'):
		return fmt.Errorf("route %q: an HTTP route is matched exactly, as its ServeMux pattern: \"*\" has no meaning in it", p)
	}
	return muxAccepts(p)
}

// muxAccepts reports what net/http's ServeMux says of pattern p: nil when
// it registers it, otherwise the reason it panics with.
func muxAccepts(p string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("route %q is not a ServeMux pattern: %v", p, r)
		}
	}()
	http.NewServeMux().Handle(p, http.NotFoundHandler())
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
	// admissions are the overload controls of the rules with Overload.
	admissions []*admission
	calls      planSet
	// messages are the message plans of those rules with PerMessage.
	messages planSet
}

// planSet is the plans one decision follows: the enforcing rules' first,
// then the shadow rules', each in WithRules order.
type planSet struct {
	plans []*plan
	// enforcing is how many of plans are not Shadow.
	enforcing int
	// owes: some plan's rule has Settle or InFlight, which a call owes
	// something once it ends.
	owes bool
}

// add appends p in its place: after the enforcing plans when it is one.
func (s *planSet) add(p *plan) {
	s.owes = s.owes || p.scope == scopeCall && (p.rule.Settle != nil || p.inFlight != nil)
	if p.rule.Shadow {
		s.plans = append(s.plans, p)
		return
	}
	s.plans = slices.Insert(s.plans, s.enforcing, p)
	s.enforcing++
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
			if r.admission != nil {
				set.admissions = append(set.admissions, r.admission)
			}
			if r.call != nil {
				set.calls.add(r.call)
			}
			if r.message != nil {
				set.messages.add(r.message)
			}
		}
		if len(set.calls.plans) == 0 && len(set.admissions) == 0 {
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
	for _, plans := range [][]*plan{set.calls.plans, set.messages.plans} {
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
