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

// The schema of a configuration file: envoyproxy/ratelimit's (YamlRoot,
// YamlDescriptor, YamlRateLimit and YamlReplaces in its
// src/config/config_impl.go) with the keys it accepts that tollgate has no
// use for, and tollgate's block in rate_limit (ExtensionKey). A file is
// decoded strictly: a key the schema does not name is an error.
type (
	fileYAML struct {
		Domain      string           `yaml:"domain"`
		Descriptors []descriptorYAML `yaml:"descriptors"`
		Pos         pos              `yaml:",inline"`
	}
	descriptorYAML struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value"`
		RateLimit      *rateLimitYAML   `yaml:"rate_limit"`
		Descriptors    []descriptorYAML `yaml:"descriptors"`
		ShadowMode     bool             `yaml:"shadow_mode"`
		DetailedMetric bool             `yaml:"detailed_metric"`
		ShareThreshold bool             `yaml:"share_threshold"`
		ValueToMetric  bool             `yaml:"value_to_metric"` // metric naming; tollgate names a descriptor by its path
		Metadata       yaml.Node        `yaml:"metadata"`        // response metadata, not produced
		QuotaMode      bool             `yaml:"quota_mode"`      // refused when true: every limit is enforced
		Pos            pos              `yaml:",inline"`
	}
	rateLimitYAML struct {
		Unit            string         `yaml:"unit"`
		RequestsPerUnit integer        `yaml:"requests_per_unit"`
		Unlimited       bool           `yaml:"unlimited"`
		Name            string         `yaml:"name"`
		Replaces        []replacesYAML `yaml:"replaces"`
		Tollgate        *extensionYAML `yaml:"tollgate"`
		Pos             pos            `yaml:",inline"`
	}
	replacesYAML struct {
		Name string `yaml:"name"`
		Pos  pos    `yaml:",inline"`
	}
	// extensionYAML is the tollgate block; see ExtensionKey.
	extensionYAML struct {
		Algorithm string  `yaml:"algorithm"`
		Burst     integer `yaml:"burst"`
		Calendar  bool    `yaml:"calendar"`
		Pos       pos     `yaml:",inline"`
	}
)

// ExtensionKey is the key, inside a rate_limit block, of tollgate's
// extension: another algorithm, a burst, calendar windows. For example
//
//	rate_limit:
//	  unit: minute
//	  requests_per_unit: 100
//	  tollgate: {algorithm: gcra, burst: 20}
//
// algorithm is token_bucket, gcra, sliding_window or fixed_window (the
// default); burst (token_bucket and gcra only) is the most admitted at once,
// 0 meaning requests_per_unit; calendar: true makes a fixed window of unit
// day, week, month or year start at UTC calendar boundaries.
const ExtensionKey = "tollgate"

// pos is where a mapping of the file is, for the errors compile finds.
// Embedded with ",inline", it is given the mapping's node before the
// fields are decoded.
type pos struct{ node *yaml.Node }

func (p *pos) UnmarshalYAML(n *yaml.Node) error {
	p.node = n
	return nil
}

// line returns the mapping's line.
func (p pos) line() int {
	if p.node == nil {
		return 0
	}
	return p.node.Line
}

// at returns the line of key's value in the mapping, 0 when key is absent.
func (p pos) at(key string) int {
	if p.node != nil {
		for i := 0; i+1 < len(p.node.Content); i += 2 {
			if p.node.Content[i].Value == key {
				return p.node.Content[i+1].Line
			}
		}
	}
	return 0
}

// integer is an int64 written as a YAML integer: yaml.v3 alone would take
// 1.5 for 1. A value of another kind is refused in yaml.v3's words, for
// decodeError to read as its own.
type integer int64

func (i *integer) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into int64", n.Line, n.ShortTag(), n.Value)}}
	}
	return n.Decode((*int64)(i))
}

// decodeFile decodes f into the schema.
func decodeFile(f File) (*fileYAML, error) {
	var doc fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	dec.KnownFields(true)
	err := dec.Decode(&doc)
	var te *yaml.TypeError
	switch {
	case err == nil:
		return &doc, nil
	case errors.Is(err, io.EOF):
		return nil, &ConfigError{File: f.Name, Msg: "empty file: want a mapping with domain and descriptors"}
	case errors.As(err, &te):
		return nil, decodeError(f.Name, &doc, te.Errors[0])
	}
	return nil, syntaxError(f.Name, err)
}

// syntaxError is a ConfigError for a YAML syntax error, with the line
// yaml.v3 names in its message ("yaml: line 3: ...") moved to Line.
func syntaxError(file string, err error) error {
	line, msg := cutLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return &ConfigError{File: file, Line: line, Msg: "not valid YAML: " + msg}
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

// decodeError rewrites the first of yaml.v3's decoding errors in the
// file's terms, naming the key and the descriptor it is about. The schema
// gives rise to three of yaml.v3's messages (after "line N: "):
//
//	field NAME not found in type T
//	mapping key "NAME" already defined at line M
//	cannot unmarshal TAG[ `VALUE`] into T
func decodeError(file string, doc *fileYAML, msg string) error {
	line, msg := cutLine(msg)
	e := &ConfigError{File: file, Line: line, Msg: msg}
	keyAt := func(name string) func(k, v *yaml.Node) bool {
		return func(k, _ *yaml.Node) bool { return k.Line == line && k.Value == name }
	}
	if name, ok := cutAround(msg, "field ", " not found in type "); ok {
		e.Msg = fmt.Sprintf("unknown key %q", name)
		if s, ok := find(doc, keyAt(name)); ok {
			e.Descriptor = s.path
			switch {
			case s.key.ShortTag() != "!!str":
				e.Msg = "a key must be a string, got " + kindName(s.key.ShortTag())
			case s.block != "":
				e.Msg += " in " + s.block
			}
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
				sub.path, sub.block = joinPath(cmp.Or(in.path, domain), scalarOf(item, "key"), scalarOf(item, "value")), ""
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
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
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
