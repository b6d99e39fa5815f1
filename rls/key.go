package rls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/keyfunc"
)

// Store keys. A descriptor's tollgate.Request.Key is laid out exactly as
// package interceptor lays out a rule's key, with the domain as the rule
// name and the descriptor's entries as the key function's value:
//
//	<domain> NUL "ck:" <key1> "=" <value1> "&" <key2> "=" <value2> ...
//
// Keys and values are escaped: '%', '=', '&' and '~' become "%25", "%3D",
// "%26" and "%7E", so no value can move a boundary. An entry matched by a
// share_threshold wildcard is written <key> "~" <pattern> instead, so the
// bucket every matching value shares is not the bucket of a value equal to
// the pattern. A domain cannot contain NUL (the configuration refuses it),
// so no domain's key is another's.
//
// An interceptor.Rule named after the domain whose Key is Descriptor(...)
// with the same entry keys therefore debits the same bucket as the edge,
// provided its Limit has the same Algorithm and the same Rate and Period.
const keySeparator = "\x00ck:"

// Entry is one key/value pair of a rate-limit descriptor.
type Entry struct {
	Key, Value string
}

// StoreKey returns the store key of a descriptor of domain: the
// tollgate.Request.Key the server decides it under (for a descriptor not
// matched through a share_threshold wildcard). Use it to Peek or Reset an
// identity from an admin tool.
func StoreKey(domain string, entries ...Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteString(keySeparator)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		writeEscaped(&b, e.Value)
	}
	return b.String()
}

// EntryFunc names one descriptor entry an interceptor reads from a call:
// the entry's key as Envoy's rate-limit action sets it (descriptor_key) and
// the key function that finds the same value in the call.
type EntryFunc struct {
	Key   string
	Value keyfunc.Func
}

// Descriptor returns a key function for an interceptor.Rule whose value is
// the descriptor made of entries, laid out as the server lays out its store
// keys. With the rule named after the domain, the interceptor and the edge
// debit the same bucket for the same identity. It fails when one of the
// entries' functions fails. No entry, an empty Key or a nil or
// misconfigured Value gives a misconfigured Func (keyfunc.Validate), which
// interceptor.New refuses naming the rule.
func Descriptor(entries ...EntryFunc) keyfunc.Func {
	if len(entries) == 0 {
		return keyfunc.Misconfigured(errors.New("rls.Descriptor: no entry given"))
	}
	for i, e := range entries {
		if e.Key == "" {
			return keyfunc.Misconfigured(fmt.Errorf("rls.Descriptor: entry %d: the Key is empty", i))
		}
		if err := keyfunc.Validate(e.Value); err != nil {
			return keyfunc.Misconfigured(fmt.Errorf("rls.Descriptor: entry %d (%q): %w", i, e.Key, err))
		}
	}
	entries = slices.Clone(entries)
	return func(ctx context.Context, call keyfunc.Call) (string, error) {
		var b strings.Builder
		for i, e := range entries {
			v, err := e.Value(ctx, call)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('&')
			}
			writeEscaped(&b, e.Key)
			b.WriteByte('=')
			writeEscaped(&b, v)
		}
		return b.String(), nil
	}
}

// escapedLen is len(s) once escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

func needsEscape(c byte) bool { return c == '%' || c == '=' || c == '&' || c == '~' }

func writeEscaped(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; needsEscape(c) {
			b.WriteString(s[start:i])
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			start = i + 1
		}
	}
	b.WriteString(s[start:])
}
