package store

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
)

// Redis key names; every key is listed in docs/internals.md#redis-keys. The
// keys of a decision share one hash tag, hence one Cluster slot, and the
// algorithm is in every name, so an identity's keys for two algorithms
// never meet.
//
// The tag is the identity itself when it is short and made of safe bytes, so
// operators can read it in redis-cli; other bytes are percent-escaped ("%7B"
// for "{", "%25" for "%"), which keeps the tag free of braces and the mapping
// one-to-one. An identity that is empty or whose escaped form would be longer
// than maxVerbatimTag becomes "#" and the base64url of the first 128 bits of
// its SHA-256: an escaped tag never holds "#", so no identity can produce
// another identity's tag by accident or by design.
const (
	// maxVerbatimTag is the longest tag written out (escaped) rather than
	// hashed. Longer identities would only make every key longer.
	maxVerbatimTag = 64
	// hashedTagMarker starts every hashed tag; escapedTag never emits it.
	hashedTagMarker = '#'
	// hashBytes is how much of a SHA-256 a hashed tag or request id keeps.
	hashBytes = 16
)

// encodedHashLen is the length of base64url(hashBytes bytes), unpadded.
var encodedHashLen = base64.RawURLEncoding.EncodedLen(hashBytes)

// algorithmCode names each algorithm inside key names.
var algorithmCode = [...]string{
	tollgate.TokenBucket:   "tb",
	tollgate.GCRA:          "gcra",
	tollgate.SlidingWindow: "sw",
	tollgate.FixedWindow:   "fw",
}

// safeTagByte marks the bytes an identity may show as themselves in a tag:
// letters, digits and - _ . : / @ = + , — no braces, no "%" (the escape) and
// no "#" (the hashed-tag marker).
var safeTagByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-_.:/@=+," {
		t[c] = true
	}
	return t
}()

// safePartByte marks the bytes a part (see partkey.Join) may show as
// themselves: those of a tag but ":", so that a part never reads as the
// ":r:" of a request-id marker.
var safePartByte = func() [256]bool {
	t := safeTagByte
	t[':'] = false
	return t
}()

const upperHex = "0123456789ABCDEF"

// escapedLen returns the length of s with every byte safe does not mark
// written "%XX", or -1 when that is longer than maxVerbatimTag: s is then
// hashed.
func escapedLen(s string, safe *[256]bool) int {
	if len(s) > maxVerbatimTag {
		return -1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if safe[s[i]] {
			n++
		} else {
			n += 3
		}
	}
	if n > maxVerbatimTag {
		return -1
	}
	return n
}

// appendEscaped appends s to b with every byte safe does not mark written
// "%XX".
func appendEscaped(b *strings.Builder, s string, safe *[256]bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe[c] {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xf])
	}
}

// escapedTagLen returns the length of identity's escaped tag, or -1 when it
// must be hashed (empty, or escaped longer than maxVerbatimTag).
func escapedTagLen(identity string) int {
	if identity == "" {
		return -1
	}
	return escapedLen(identity, &safeTagByte)
}

// appendTag appends identity's tag (without braces) to b; tagLen is
// escapedTagLen(identity).
func appendTag(b *strings.Builder, identity string, tagLen int) {
	if tagLen < 0 {
		b.WriteByte(hashedTagMarker)
		appendHash(b, identity)
		return
	}
	if tagLen == len(identity) {
		b.WriteString(identity)
		return
	}
	appendEscaped(b, identity, &safeTagByte)
}

// appendHash appends the base64url of the first 128 bits of s's SHA-256.
func appendHash(b *strings.Builder, s string) {
	var sum [sha256.Size]byte
	if len(s) <= tollgate.MaxRequestIDLen {
		// Request ids and short identities are hashed from a stack copy:
		// converting the string would allocate on every decision.
		var buf [tollgate.MaxRequestIDLen]byte
		sum = sha256.Sum256(buf[:copy(buf[:], s)])
	} else {
		sum = sha256.Sum256([]byte(s))
	}
	var enc [24]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:hashBytes])
	b.Write(enc[:encodedHashLen])
}

// decisionKeys returns the KEYS of one decision in lua/doc.go order for
// identity under prefix: the state key, and the request-id key (the hash of
// requestID, under the same tag so the call stays on one slot) when
// requestID is not empty.
func decisionKeys(prefix string, alg tollgate.Algorithm, identity, requestID string) []string {
	var keys [2]string
	n := fillDecisionKeys(&keys, prefix, alg, identity, requestID)
	return keys[:n]
}

// fillDecisionKeys is decisionKeys writing into dst, which the store keeps
// in the decision's call, and returning how many keys it wrote. The names
// share one backing string: one allocation for both, on every decision.
func fillDecisionKeys(dst *[2]string, prefix string, alg tollgate.Algorithm, identity, requestID string) int {
	return fillKeys(dst, prefix, algorithmCode[alg], identity, requestID)
}

// Codes of the keys that are not an algorithm's state, on an identity's
// tag beside its states: its in-flight seats, its overrides and the
// members sharing it.
const (
	seatsCode    = "if"
	holdCode     = "ih"
	overrideCode = "ov"
	shareCode    = "sh"
)

// keyOf returns the key named code of identity: prefix{tag}/part:code, as
// a state key is named.
func keyOf(prefix, code, identity string) string {
	var k [2]string
	fillKeys(&k, prefix, code, identity, "")
	return k[0]
}

// recordKey returns the key of requestID's settle record of the state
// named stateKey: on its tag, beside its request-id marker.
func recordKey(stateKey, requestID string) string {
	var b strings.Builder
	b.Grow(len(stateKey) + 3 + encodedHashLen)
	b.WriteString(stateKey)
	b.WriteString(":s:")
	appendHash(&b, requestID)
	return b.String()
}

// fillKeys is fillDecisionKeys for the key named code.
func fillKeys(dst *[2]string, prefix, code, identity, requestID string) int {
	head, part, hasPart := strings.Cut(identity, partkey.Separator)
	escapedLen := escapedTagLen(head)
	tagLen := escapedLen
	if tagLen < 0 {
		tagLen = 1 + encodedHashLen
	}
	partLen := 0
	if hasPart {
		partLen = 1 + escapedPartLen(part)
		if partLen < 1 {
			partLen = 2 + encodedHashLen
		}
	}
	baseLen := len(prefix) + 1 + tagLen + 1 + partLen + 1 + len(code) // prefix{tag}/part:code
	n := baseLen
	if requestID != "" {
		n += baseLen + 3 + encodedHashLen // base ":r:" id
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	b.WriteByte('{')
	appendTag(&b, head, escapedLen)
	b.WriteByte('}')
	if hasPart {
		b.WriteByte('/')
		appendPart(&b, part)
	}
	b.WriteByte(':')
	b.WriteString(code)
	if requestID == "" {
		*dst = [2]string{b.String()}
		return 1
	}
	b.WriteString(b.String()[:baseLen])
	b.WriteString(":r:")
	appendHash(&b, requestID)
	all := b.String()
	*dst = [2]string{all[:baseLen], all[baseLen:]}
	return 2
}

// escapedPartLen returns the length of part's escaped form (safePartByte),
// or -1 when it must be hashed (escaped longer than maxVerbatimTag).
func escapedPartLen(part string) int { return escapedLen(part, &safePartByte) }

// appendPart appends part escaped, or "#" and its hash when too long.
func appendPart(b *strings.Builder, part string) {
	if escapedPartLen(part) < 0 {
		b.WriteByte(hashedTagMarker)
		appendHash(b, part)
		return
	}
	appendEscaped(b, part, &safePartByte)
}

// crc16 is the CRC-16/XMODEM Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// hashTag returns the part of key Redis Cluster hashes: the bytes between
// the first "{" and the first "}" after it when there are any, otherwise
// the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// slot is the Cluster slot of key.
func slot(key string) int { return int(crc16(hashTag(key)) % 16384) }

// The tagged layout (WithClusterTags): an identity's keys are its keys of
// the default layout behind one of n shared hash tags,
//
//	<prefix>{!<i>}{<tag>}/<part>:<code>
//
// Redis Cluster hashes the first braces only, so every key behind shared
// tag k is on one slot; the rest of the name is the default layout's, so
// the state of one identity is still a key of its own. Shared tag k is
// "!<i>" with the least i that puts it on a slot in the k-th of n equal
// ranges of the slot space. No default-layout tag starts with "!" (it is
// neither a safe tag byte nor the hashed-tag marker), and the overrides'
// own tags start "!ov": the layouts never share a key.

// tagPrefixes returns the prefix of each of n shared tags: prefix and the
// tag in braces; nil when n is 0.
func tagPrefixes(prefix string, n int) []string {
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i, left := 0, n; left > 0; i++ {
		tag := "!" + strconv.Itoa(i)
		if k := int(crc16(tag)%16384) * n / 16384; out[k] == "" {
			out[k], left = prefix+"{"+tag+"}", left-1
		}
	}
	return out
}

// tagOf is the shared tag, of n, of identity's keys: FNV-1a of the bytes
// before its first part separator (see partkey.Join), so the parts of one
// identity share its tag, modulo n.
func tagOf(identity string, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(identity); i++ {
		c := identity[i]
		if c == partkey.Separator[0] {
			break
		}
		h = (h ^ uint64(c)) * 1099511628211
	}
	return int(h % uint64(n))
}

// keySpace is where a Redis store's keys live, decided once at NewRedis:
// its prefix, the tagged layout's shared tags, how its client spreads a
// call's keys (one server, a Cluster's slots, a Ring's hash tags), and its
// slots' lineage keys.
type keySpace struct {
	prefix string
	// tagPrefixes, when WithClusterTags is on, is each shared tag's
	// prefix: the store's and the tag in braces.
	tagPrefixes []string
	// single: a *redis.Client, one server (a node, Sentinel); cluster: a
	// *redis.ClusterClient, whose calls each take one slot's keys.
	single, cluster bool
	lineage         *lineageKeys
}

// newKeySpace returns the key space of a store with prefix and tags
// shared tags (0: the default layout) on c.
func newKeySpace(prefix string, tags int, c redis.UniversalClient) keySpace {
	_, single := c.(*redis.Client)
	_, cluster := c.(*redis.ClusterClient)
	return keySpace{prefix: prefix, tagPrefixes: tagPrefixes(prefix, tags), single: single, cluster: cluster,
		lineage: newLineageKeys(prefix, cluster)}
}

// of is what identity's keys start with: the store's prefix, or in the
// tagged layout its shared tag's prefix.
func (k *keySpace) of(identity string) string {
	if k.tagPrefixes == nil {
		return k.prefix
	}
	return k.tagPrefixes[tagOf(identity, len(k.tagPrefixes))]
}

// keyPrefix is keySpace.of, for the files that name keys by it.
func (r *Redis) keyPrefix(identity string) string { return r.keys.of(identity) }

// sameSlot reports whether key and the state key state can go in one
// script call: always on one server, on a Cluster when they share a slot.
func (k *keySpace) sameSlot(key, state string) bool {
	if !k.cluster {
		return k.single
	}
	return slot(key) == slot(state)
}

// oneSlot reports whether the state keys states and every key of the
// seats of release can go in one script call: on one server always, on a
// Cluster when they share one slot.
func (k *keySpace) oneSlot(states []string, release []tollgate.Seat) bool {
	if !k.cluster {
		return k.single
	}
	want := -1
	same := func(key string) bool {
		s := slot(key)
		if want < 0 {
			want = s
		}
		return s == want
	}
	for _, key := range states {
		if !same(key) {
			return false
		}
	}
	for _, s := range release {
		if !same(keyOf(k.of(s.Key), seatsCode, s.Key)) {
			return false
		}
	}
	return true
}

// layout is where the requests of a set live in Redis, worked out once for
// the whole call: their keys, and the parts of the set that one script call
// each can take.
type layout struct {
	// keys are the requests' state keys, in the set's order, then, when
	// the set's decide calls keep request-id markers, their markers: the
	// KEYS of a decide call of the whole set (lua/doc.go).
	keys []string
	// parts groups the indexes of the requests by the script call that
	// can take them (see partition).
	parts [][]int
}

// layOut lays out reqs (normalized), with the request-id markers of
// markers ("" for none): each request's keys, then the parts they fall in.
func (k *keySpace) layOut(reqs []tollgate.Request, markers string) layout {
	keys := k.setKeys(reqs, markers)
	return layout{keys: keys, parts: k.partition(keys[:len(reqs)])}
}

// setKeys returns the state keys of reqs (normalized) in their order,
// then, when markers is not empty, the request-id markers of markers, one
// per request, in the same order.
func (k *keySpace) setKeys(reqs []tollgate.Request, markers string) []string {
	n := len(reqs)
	nkeys := n
	if markers != "" {
		nkeys = 2 * n
	}
	keys := make([]string, nkeys)
	for i, req := range reqs {
		var two [2]string
		fillDecisionKeys(&two, k.of(req.Key), req.Limit.Algorithm, req.Key, markers)
		keys[i] = two[0]
		if markers != "" {
			keys[n+i] = two[1]
		}
	}
	return keys
}

// onePart is the parts of a set of one request: shared, as parts are only
// ever read.
var onePart = [][]int{{0}}

// partition groups the indexes of the requests whose state keys are states
// into the parts one script call can decide, each in the set's order: one
// part on a single node, one per Cluster slot on a ClusterClient, one per
// hash tag on any other client.
func (k *keySpace) partition(states []string) [][]int {
	if len(states) == 1 {
		return onePart
	}
	if k.single {
		all := make([]int, len(states))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var parts [][]int
	index := make(map[string]int, len(states))
	for i, key := range states {
		part := hashTag(key)
		if k.cluster {
			part = strconv.Itoa(slot(key))
		}
		j, ok := index[part]
		if !ok {
			j = len(parts)
			index[part] = j
			parts = append(parts, nil)
		}
		parts[j] = append(parts[j], i)
	}
	return parts
}

// The lineage keys (lua/doc.go, Lineage): a call stamped with an era that
// writes a state also writes the lineage of its slot, one key per slot and
// prefix,
//
//	<prefix>{!L<t>}:lineage
//
// where <t> is the shortest base-36 number that puts the tag on the slot,
// so that the key can join any call on that slot; a client of one server
// (a single node, Sentinel) has one, <prefix>{!L}:lineage. No other
// layout's tag starts "!L": the tagged layout's are "!" and digits, the
// overrides' "!ov".
type lineageKeys struct {
	one    string                   // a client of one server's, and a Ring's
	prefix string                   // a Cluster client's: the keys are made as their slots are met
	slots  []atomic.Pointer[string] // by slot; nil off a Cluster
}

func newLineageKeys(prefix string, cluster bool) *lineageKeys {
	l := &lineageKeys{one: prefix + "{!L}:lineage", prefix: prefix}
	if cluster {
		l.slots = make([]atomic.Pointer[string], 16384)
	}
	return l
}

// of returns the lineage key of key's slot.
func (l *lineageKeys) of(key string) string {
	if l.slots == nil {
		return l.one
	}
	s := slot(key)
	if p := l.slots[s].Load(); p != nil {
		return *p
	}
	k := l.prefix + "{" + slotTags()[s] + "}:lineage"
	l.slots[s].Store(&k)
	return k
}

// slotTags holds, for each Cluster slot, the lineage tag "!L<t>" on it,
// made once (about 170,000 CRCs, a few milliseconds) when a Cluster
// client's first lineage key is needed.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, 16384)
	for n, left := int64(0), len(tags); left > 0; n++ {
		tag := "!L" + strconv.FormatInt(n, 36)
		if s := crc16(tag) % 16384; tags[s] == "" {
			tags[s], left = tag, left-1
		}
	}
	return tags
})
