package rls

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the rule for a request descriptor's entries as
// envoyproxy/ratelimit finds it: at each level, the entry's exact key and
// value first, then the wildcard values of that key in file order, then
// the key alone; a rule applies only when it sits at the depth of the
// descriptor's last entry. It returns nil when nothing applies, and
// otherwise the nodes matched at each level (into path, which it reuses).
func (d *domain) match(entries []*rlv3.RateLimitDescriptor_Entry, path []*descriptor) (*rule, []*descriptor) {
	path = path[:0]
	l := d.root
	for i, e := range entries {
		n := l.exact[Entry{e.GetKey(), e.GetValue()}]
		if n == nil {
			for _, w := range l.wildcards {
				if w.key == e.GetKey() && wildcardMatch(w.parts, e.GetValue()) {
					n = w
					break
				}
			}
		}
		if n == nil {
			n = l.byKey[e.GetKey()]
		}
		if n == nil {
			return nil, path
		}
		path = append(path, n)
		if i == len(entries)-1 {
			return n.limit, path
		}
		if n.children.empty() {
			return nil, path
		}
		l = n.children
	}
	return nil, path
}

// wildcardMatch reports whether value matches a pattern split at its '*'s:
// each '*' matches any run of bytes, possibly empty.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// storeKey is StoreKey for a matched descriptor: entries matched through a
// share_threshold wildcard (path, the matched nodes, may be empty) are
// written with the pattern instead of their value.
func storeKey(domain string, entries []*rlv3.RateLimitDescriptor_Entry, path []*descriptor) string {
	var b strings.Builder
	b.Grow(keyLen(domain, entries))
	b.WriteString(domain)
	b.WriteString(keySeparator)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		writeEscaped(&b, e.GetKey())
		if i < len(path) && path[i].shared {
			b.WriteByte('~')
			writeEscaped(&b, path[i].value)
			continue
		}
		b.WriteByte('=')
		writeEscaped(&b, e.GetValue())
	}
	return b.String()
}

// keyLen is len(storeKey(...)), computed without building it, so that an
// oversized descriptor is refused before anything is allocated for it.
func keyLen(domain string, entries []*rlv3.RateLimitDescriptor_Entry) int {
	n := len(domain) + len(keySeparator)
	for _, e := range entries {
		n += escapedLen(e.GetKey()) + escapedLen(e.GetValue()) + 2 // '=' and '&'
	}
	return n
}

// metricPath names a matched descriptor in spans and metrics: the rule's
// configuration path, or, with detailed_metric, the request's own keys and
// values.
func metricPath(domain string, r *rule, entries []*rlv3.RateLimitDescriptor_Entry) string {
	if !r.detailed {
		return r.path
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}
