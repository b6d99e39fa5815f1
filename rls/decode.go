package rls

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decodeFile decodes f into the schema.
func decodeFile(f File) (*fileYAML, error) {
	var doc fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	dec.KnownFields(true)
	err := dec.Decode(&doc)
	var te *yaml.TypeError
	switch {
	case err == nil && doc.Pos.node == nil:
		return nil, &ConfigError{File: f.Name, Msg: "want a mapping with domain and descriptors, got null"}
	case err == nil:
		return &doc, nil
	case errors.Is(err, io.EOF):
		return nil, &ConfigError{File: f.Name, Msg: "empty file: want a mapping with domain and descriptors"}
	case errors.As(err, &te):
		return nil, decodeError(f.Name, &doc, te.Errors[0])
	}
	return nil, syntaxError(f, err)
}

// syntaxError is a ConfigError for a YAML syntax error at the line at
// fault (faultLine), with yaml.v3's message.
func syntaxError(f File, err error) error {
	line, msg := cutLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return &ConfigError{File: f.Name, Line: faultLine(f.Data, line, msg), Msg: "not valid YAML: " + msg}
}

// faultSearch bounds how many lines faultLine parses past the line yaml.v3
// names: a configuration's mistake is a few lines from where its block
// began, and each try parses the file up to the line.
const faultSearch = 200

// faultLine returns the line at fault for yaml.v3's syntax error msg,
// reported at line. For a parser error yaml.v3 names where the enclosing
// block or flow began, counted from 0 (a mis-indented key on line 6 in a
// mapping begun on line 3 is "line 2"), and the error itself is not
// reachable from outside it. The line at fault is the first after that
// at which the file, cut there, fails with the same message: what comes
// later cannot make the earlier lines fail, and a cut that only leaves a
// valid construct open fails with another message. When no such line is
// found, the line yaml.v3 named stands.
func faultLine(data []byte, line int, msg string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := max(line, 1); k <= len(lines) && k <= line+faultSearch; k++ {
		var v any
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &v)
		if err == nil {
			continue
		}
		if _, m := cutLine(strings.TrimPrefix(err.Error(), "yaml: ")); m == msg {
			return k
		}
	}
	return line
}

// cutLine splits "line N: message".
func cutLine(msg string) (int, string) {
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				return l, after
			}
		}
	}
	return 0, msg
}

// decodeError rewrites the first of the decoding errors in the file's
// terms, naming the key and the descriptor it is about. The schema gives
// rise to three of yaml.v3's messages, and pos to one (after "line N: "):
//
//	field NAME not found in type T
//	mapping key "NAME" already defined at line M
//	cannot unmarshal TAG[ `VALUE`] into T
//	key "NAME": MESSAGE
func decodeError(file string, doc *fileYAML, msg string) error {
	line, msg := cutLine(msg)
	e := &ConfigError{File: file, Line: line, Msg: msg}
	keyAt := func(name string) func(k, v *yaml.Node) bool {
		return func(k, _ *yaml.Node) bool { return k.Line == line && k.Value == name }
	}
	if rest, ok := strings.CutPrefix(msg, "key "); ok {
		if quoted, err := strconv.QuotedPrefix(rest); err == nil {
			name, _ := strconv.Unquote(quoted)
			e.Msg = strings.TrimPrefix(rest[len(quoted):], ": ")
			if s, ok := find(doc, func(k, v *yaml.Node) bool { return k.Value == name && (k.Line == line || v.Line == line) }); ok {
				e.Descriptor = s.path
				if name == "descriptors" {
					e.Descriptor = cmp.Or(s.path, doc.Domain)
				}
			}
		}
		return e
	}
	if name, ok := cutAround(msg, "field ", " not found in type "); ok {
		e.Msg = fmt.Sprintf("unknown key %q", name)
		if s, ok := find(doc, keyAt(name)); ok {
			e.Descriptor = s.path
			if s.block != "" {
				e.Msg += " in " + s.block
			}
		}
		if keys, ok := schemaKeys[msg[strings.LastIndex(msg, " ")+1:]]; ok {
			e.Msg += " (want " + keys + ")"
		}
		return e
	}
	if quoted, ok := cutAround(msg, "mapping key ", " already defined at line "); ok {
		name, _ := strconv.Unquote(quoted)
		e.Msg = fmt.Sprintf("key %q appears twice", name)
		if s, ok := find(doc, keyAt(name)); ok {
			e.Descriptor = s.path
		}
		return e
	}
	rest, ok := strings.CutPrefix(msg, "cannot unmarshal ")
	if !ok {
		return e
	}
	tag, into, _ := strings.Cut(rest, " into ")
	tag, value, _ := strings.Cut(tag, " `")
	value = strings.TrimSuffix(strings.TrimSuffix(value, "`"), "...")
	if into == reflect.TypeFor[fileYAML]().String() {
		e.Msg = "want a mapping with domain and descriptors, got " + kindName(tag)
		return e
	}
	s, ok := find(doc, func(_, v *yaml.Node) bool {
		return v.Line == line && v.ShortTag() == tag && strings.HasPrefix(v.Value, value)
	})
	if !ok {
		return e
	}
	e.Descriptor, e.Msg = s.path, s.key.Value
	if s.key.Value == "descriptors" {
		e.Descriptor = cmp.Or(s.path, doc.Domain) // the list is the descriptor's, or the domain's
	}
	if s.item {
		e.Msg = "an entry of " + e.Msg
	}
	e.Msg += " must be " + wantOf(into) + ", got " + kindName(tag)
	if s.value.Kind == yaml.ScalarNode {
		e.Msg += " " + strconv.Quote(s.value.Value)
	}
	return e
}

// schemaKeys lists the keys of each mapping of the schema, by the name of
// its Go type, for the errors that name an unknown key.
var schemaKeys = func() map[string]string {
	m := map[string]string{}
	for _, t := range []reflect.Type{reflect.TypeFor[fileYAML](), reflect.TypeFor[descriptorYAML](), reflect.TypeFor[rateLimitYAML](), reflect.TypeFor[replacesYAML](), reflect.TypeFor[extensionYAML](), reflect.TypeFor[limitYAML](), reflect.TypeFor[domainYAML]()} {
		var keys []string
		for i := range t.NumField() {
			if key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); key != "" {
				keys = append(keys, key)
			}
		}
		m[t.String()] = orList(keys)
	}
	return m
}()

// cutAround returns what msg has between prefix and the last sep.
func cutAround(msg, prefix, sep string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, prefix)
	if i := strings.LastIndex(rest, sep); ok && i >= 0 {
		return rest[:i], true
	}
	return "", false
}

// spot is the key and value of the file a decoding error is about.
type spot struct {
	path  string // the descriptor they are in; "" for the file's own keys
	block string // the block of the descriptor they are in (rate_limit, tollgate, replaces), if any
	key   *yaml.Node
	value *yaml.Node // the value, or the entry of it when item
	item  bool
}

// find returns the first key and value of doc's file, in file order, that
// match accepts.
func find(doc *fileYAML, match func(k, v *yaml.Node) bool) (spot, bool) {
	if doc.Pos.node == nil {
		return spot{}, false
	}
	return search(doc.Pos.node, spot{}, doc.Domain, match)
}

// search looks through the mapping m, which is in the descriptor (and the
// block) in.
func search(m *yaml.Node, in spot, domain string, match func(k, v *yaml.Node) bool) (spot, bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if match(k, v) {
			in.key, in.value = k, v
			return in, true
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Content
		}
		for _, item := range items {
			if item != v && match(k, item) {
				in.key, in.value, in.item = k, item, true
				return in, true
			}
			if item.Kind != yaml.MappingNode {
				continue
			}
			sub := in
			sub.block = k.Value
			if k.Value == "descriptors" && in.block == "" {
				// A descriptor without a key is named by its parent, as
				// compile names it.
				sub.path, sub.block = cmp.Or(in.path, domain), ""
				if key := scalarOf(item, "key"); key != "" {
					sub.path = joinPath(sub.path, key, scalarOf(item, "value"))
				}
			}
			if s, ok := search(item, sub, domain, match); ok {
				return s, true
			}
		}
	}
	return spot{}, false
}

// scalarOf returns the value of key in the mapping m, if a scalar.
func scalarOf(m *yaml.Node, key string) string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if v := m.Content[i+1]; m.Content[i].Value == key && v.Kind == yaml.ScalarNode && v.ShortTag() != "!!null" {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// wantOf says what a value decoded into the Go type named typ must be.
func wantOf(typ string) string {
	switch {
	case strings.HasPrefix(typ, "[]"):
		return "a list"
	case typ == "bool":
		return "true or false"
	case typ == "int64":
		return "an integer"
	case typ == "string":
		return "a string"
	}
	return "a mapping"
}

// kindName names what a YAML tag is.
func kindName(tag string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	case "!!null":
		return "null"
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!bool":
		return "a boolean"
	case "!!float":
		return "a number"
	}
	return "a scalar " + tag
}
