package heavy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"unicode/utf8"
)

// MinKeyLen is the shortest key Options.HashKey accepts.
const MinKeyLen = 16

// opaqueLen is how many bytes of the keyed hash an opaque id shows: 128
// bits, twice the 64 that make a collision among a billion identities
// unlikely.
const opaqueLen = 16

// readableLen is how much of an identity too long or not UTF-8 is shown,
// before an ellipsis and a hash of the whole (plainHashLen bytes of
// SHA-256, as hex) that tells it apart from others of the same prefix.
const (
	readableLen  = 40
	plainHashLen = 8
)

// labeler writes how an identity is shown. One belongs to each shard and
// is used under its lock, so that its hashes and buffers are reused.
type labeler struct {
	mac   hash.Hash // keyed: identities are shown as an opaque id
	plain hash.Hash // SHA-256, for identities shown by a prefix
	sum   [sha256.Size]byte
	chunk [256]byte
}

func newLabeler(key []byte) labeler {
	l := labeler{plain: sha256.New()}
	if key != nil {
		l.mac = hmac.New(sha256.New, key)
	}
	return l
}

// label writes into dst how identity is shown and returns its length: with
// a key, the hex of the first 16 bytes of HMAC-SHA256(key, identity);
// without, identity itself when it is valid UTF-8 of at most 64 bytes,
// else its first valid runes (up to 40 bytes), "…" and the hex of the
// first 8 bytes of its SHA-256.
func (l *labeler) label(dst *[labelCap]byte, identity string) int {
	if l.mac != nil {
		return hex.Encode(dst[:], l.hash(l.mac, identity)[:opaqueLen])
	}
	if len(identity) <= labelCap && utf8.ValidString(identity) {
		return copy(dst[:], identity)
	}
	n := readablePrefix(identity)
	n = copy(dst[:], identity[:n])
	n += copy(dst[n:], "…")
	return n + hex.Encode(dst[n:], l.hash(l.plain, identity)[:plainHashLen])
}

// hash returns h's sum of identity, written a chunk at a time so that a
// long identity costs no allocation.
func (l *labeler) hash(h hash.Hash, identity string) []byte {
	h.Reset()
	for len(identity) > 0 {
		n := copy(l.chunk[:], identity)
		h.Write(l.chunk[:n])
		identity = identity[n:]
	}
	return h.Sum(l.sum[:0])
}

// readablePrefix is the length of identity's longest prefix of at most
// readableLen bytes made of whole valid runes.
func readablePrefix(identity string) int {
	n := 0
	for n < len(identity) {
		r, size := utf8.DecodeRuneInString(identity[n:])
		if (r == utf8.RuneError && size == 1) || n+size > readableLen {
			break
		}
		n += size
	}
	return n
}

// OpaqueID returns the id under which a Sketch with HashKey key shows
// identity, so that an operator can tell whether a suspect is among the
// refused. With a nil key it is how a Sketch without HashKey shows
// identity.
func OpaqueID(key []byte, identity string) string {
	var dst [labelCap]byte
	l := newLabeler(key)
	return string(dst[:l.label(&dst, identity)])
}

// keyID names a key without revealing it, so that snapshots hashed under
// different keys are not merged.
func keyID(key []byte) string {
	if key == nil {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("tollgate heavy key id"))
	return hex.EncodeToString(m.Sum(nil)[:4])
}
