package httplimit_test

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// sfItem is one member of a Structured Field List whose items are Strings
// (or Display Strings) with parameters, as RateLimit-Policy and RateLimit
// are: its value and its parameters, in order.
type sfItem struct {
	value  string
	params []sfParam
}

type sfParam struct {
	key   string
	value any // int64, string, bool or sfToken
}

type sfToken string

// param returns the parameter key of it, and whether it has one.
func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return nil, false
}

// parseList parses a List as RFC 9651, section 4.2.1 says, refusing
// anything the grammar does not allow (inner lists and byte sequences
// never appear in these fields, and are refused too).
func parseList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.TrimLeft(s, " ")}
	var out []sfItem
	for p.i < len(p.s) {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.ows()
		if p.i == len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("want ',' after a member")
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("structured field %q at %d: %s", p.s, p.i, fmt.Sprintf(format, args...))
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	s, ok := v.(string)
	if !ok {
		return sfItem{}, p.errorf("the item is %T, want a String", v)
	}
	it := sfItem{value: s}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		start := p.i
		if p.i == len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
			return it, p.errorf("a key starts with lcalpha or '*'")
		}
		for p.i < len(p.s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyz0123456789_-.*", p.s[p.i]) >= 0 {
			p.i++
		}
		key := p.s[start:p.i]
		var val any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, err = p.bare(); err != nil {
				return it, err
			}
		}
		for _, q := range it.params {
			if q.key == key {
				return it, p.errorf("parameter %q twice", key)
			}
		}
		it.params = append(it.params, sfParam{key, val})
	}
	return it, nil
}

func (p *sfParser) bare() (any, error) {
	if p.i == len(p.s) {
		return nil, p.errorf("want a value")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		if c == '-' {
			p.i++
		}
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i < len(p.s) && p.s[p.i] == '.' {
			return nil, p.errorf("decimals never appear in these fields")
		}
		digits := strings.TrimPrefix(p.s[start:p.i], "-")
		if len(digits) == 0 || len(digits) > 15 {
			return nil, p.errorf("an Integer has 1 to 15 digits")
		}
		return strconv.ParseInt(p.s[start:p.i], 10, 64)
	case c == '"':
		return p.str()
	case c == '%':
		p.i++
		if p.i == len(p.s) || p.s[p.i] != '"' {
			return nil, p.errorf("want '\"' after '%%'")
		}
		p.i++
		start := p.i
		for p.i < len(p.s) && p.s[p.i] != '"' {
			if p.s[p.i] < 0x20 || p.s[p.i] > 0x7e || p.s[p.i] == '%' && !isLowerHex(p.s[p.i+1:]) {
				return nil, p.errorf("a Display String is printable ASCII with %%xx escapes in lower-case hex")
			}
			p.i++
		}
		if p.i == len(p.s) {
			return nil, p.errorf("unterminated Display String")
		}
		p.i++
		return url.PathUnescape(p.s[start : p.i-1])
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.errorf("a Boolean is ?0 or ?1")
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for p.i < len(p.s) && (strings.IndexByte(":/!#$%&'*+-.^_`|~", p.s[p.i]) >= 0 ||
			p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, p.errorf("no bare item starts with %q", c)
}

func isLowerHex(s string) bool {
	return len(s) >= 2 && strings.IndexByte("0123456789abcdef", s[0]) >= 0 && strings.IndexByte("0123456789abcdef", s[1]) >= 0
}

func (p *sfParser) str() (string, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", p.errorf("only '\"' and '\\' are escaped")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("a String is printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", p.errorf("unterminated String")
}
