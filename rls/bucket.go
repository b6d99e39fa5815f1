package rls

import (
	"cmp"
	"slices"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// maxBucketSteps bounds the search for a BucketId's reading: a BucketId
// no configuration could read in that many steps is unmatched.
const maxBucketSteps = 4096

// bucketMatch is a BucketId read as a descriptor of a domain: the rule it
// matched, its pairs in the order of the configuration's nesting, and the
// descriptors matched at each level.
type bucketMatch struct {
	rule    *rule
	entries []*rlv3.RateLimitDescriptor_Entry
	path    []*descriptor
}

// matchBucket reads a BucketId's pairs as a descriptor of d. A BucketId
// is a map, so its pairs have no order; they are read in the order the
// configuration nests them: at the root level, a pair matching a
// descriptor there, then, among that descriptor's children, one of the
// pairs left, and so on, until every pair is used and the last descriptor
// has a rate limit. When several readings exist, the first found wins,
// trying at each level a pair matching a key and value exactly, then one
// matching a wildcard value, then one matching a key alone (as a request
// descriptor's entry is matched), and among pairs of one kind the smaller
// key first. It returns false when no reading exists.
func (d *domain) matchBucket(pairs map[string]string) (bucketMatch, bool) {
	entries := make([]Entry, 0, len(pairs))
	for k, v := range pairs {
		entries = append(entries, Entry{k, v})
	}
	sortEntries(entries)
	s := bucketSearch{entries: entries, used: make([]bool, len(entries)), steps: maxBucketSteps}
	if !s.level(d.root) {
		return bucketMatch{}, false
	}
	m := bucketMatch{rule: s.path[len(s.path)-1].limit, path: s.path}
	for _, i := range s.order {
		m.entries = append(m.entries, &rlv3.RateLimitDescriptor_Entry{Key: entries[i].Key, Value: entries[i].Value})
	}
	return m, true
}

// bucketSearch is matchBucket's depth-first search.
type bucketSearch struct {
	entries []Entry
	used    []bool
	order   []int
	path    []*descriptor
	steps   int
}

// level tries to read the pairs left from l; on success order and path
// hold the reading.
func (s *bucketSearch) level(l *level) bool {
	for kind := range 3 {
		for i, e := range s.entries {
			if s.used[i] {
				continue
			}
			if s.steps--; s.steps < 0 {
				return false
			}
			n := l.node(kind, e)
			if n == nil {
				continue
			}
			s.used[i] = true
			s.order, s.path = append(s.order, i), append(s.path, n)
			if len(s.order) == len(s.entries) && n.limit != nil {
				return true
			}
			if len(s.order) < len(s.entries) && !n.children.empty() && s.level(n.children) {
				return true
			}
			s.used[i] = false
			s.order, s.path = s.order[:len(s.order)-1], s.path[:len(s.path)-1]
		}
	}
	return false
}

// node returns the descriptor of l that e matches by kind: 0 its key and
// value exactly, 1 a wildcard value (the first in file order), 2 its key
// alone.
func (l *level) node(kind int, e Entry) *descriptor {
	switch kind {
	case 0:
		return l.exact[e]
	case 1:
		for _, w := range l.wildcards {
			if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
				return w
			}
		}
		return nil
	}
	return l.byKey[e.Key]
}

// sortEntries sorts a BucketId's pairs by key (its keys are distinct).
func sortEntries(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int { return cmp.Compare(a.Key, b.Key) })
}
