package rls

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// The schema of a configuration file: envoyproxy/ratelimit's (YamlRoot,
// YamlDescriptor, YamlRateLimit and YamlReplaces in its
// src/config/config_impl.go) with the keys it accepts that tollgate has no
// use for, and tollgate's block in rate_limit (extensionKey). A file is
// decoded strictly: a key the schema does not name is an error.
type (
	fileYAML struct {
		Domain      string           `yaml:"domain"`
		Descriptors []descriptorYAML `yaml:"descriptors"`
		Tollgate    *domainYAML      `yaml:"tollgate"`
		Pos         pos              `yaml:",inline"`
	}
	// domainYAML is the tollgate block of a whole file: what applies to
	// every descriptor of the domain.
	domainYAML struct {
		CountOverLimit bool `yaml:"count_over_limit"`
		Pos            pos  `yaml:",inline"`
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
		QuotaMode      bool             `yaml:"quota_mode"`
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
	// extensionYAML is the tollgate block; see extensionKey.
	extensionYAML struct {
		Algorithm      string      `yaml:"algorithm"`
		Burst          integer     `yaml:"burst"`
		Calendar       bool        `yaml:"calendar"`
		Period         string      `yaml:"period"`
		CountOverLimit bool        `yaml:"count_over_limit"`
		Limits         []limitYAML `yaml:"limits"`
		Pos            pos         `yaml:",inline"`
	}
	// limitYAML is one more limit of a descriptor, in its tollgate block.
	limitYAML struct {
		RequestsPerUnit integer `yaml:"requests_per_unit"`
		Unit            string  `yaml:"unit"`
		Period          string  `yaml:"period"`
		Algorithm       string  `yaml:"algorithm"`
		Burst           integer `yaml:"burst"`
		Calendar        bool    `yaml:"calendar"`
		Pos             pos     `yaml:",inline"`
	}
)

// extensionKey is the key, inside a rate_limit block, of tollgate's
// extension: another algorithm, a burst, calendar windows, any period,
// several limits, hits counted over the limit. For example
//
//	rate_limit:
//	  unit: minute
//	  requests_per_unit: 100
//	  tollgate:
//	    algorithm: gcra
//	    burst: 20
//	    limits:
//	      - {requests_per_unit: 10000, unit: day}
//	      - {requests_per_unit: 300, period: 90s, algorithm: sliding_window}
//
// algorithm is token_bucket, gcra, sliding_window or fixed_window (the
// default); burst (token_bucket and gcra only) is the most admitted at once,
// 0 meaning requests_per_unit; calendar: true makes a fixed window of unit
// day, week, month or year start at UTC calendar boundaries; period (a Go
// duration, "90s", "1h30m") is the window or refill period instead of the
// unit's, which may then be left out. limits are more limits on the same
// descriptor, each with requests_per_unit and a unit or a period, and its
// own algorithm, burst and calendar: the descriptor is admitted only when
// every limit admits it, and a refused one debits none. count_over_limit:
// true counts the descriptor's hits even when they are over the limit, as
// envoyproxy/ratelimit does, for hits reported after the fact (Envoy's
// apply_on_stream_done); a file's top-level tollgate block may set it for
// every descriptor of the domain.
const extensionKey = "tollgate"

// pos is where a mapping of the file is, for the errors compile finds.
// Embedded with ",inline", it is given the mapping's node before the
// fields are decoded, and refuses what decoding would take silently: an
// alias (anchors and aliases are not supported), and a null, which would
// decode as the zero value (value: ~ would match every value,
// requests_per_unit: ~ would deny every request).
type pos struct{ node *yaml.Node }

// UnmarshalYAML keeps m and checks its keys and values.
func (p *pos) UnmarshalYAML(m *yaml.Node) error {
	p.node = m
	var errs []string
	refuse := func(n *yaml.Node, key, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("line %d: key %q: ", n.Line, key)+fmt.Sprintf(format, args...))
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch {
		case k.ShortTag() != "!!str":
			refuse(k, k.Value, "a key must be a string, got %s", kindName(k.ShortTag()))
		case k.Value == "metadata":
			continue // not read
		case k.Kind == yaml.AliasNode || v.Kind == yaml.AliasNode:
			refuse(v, k.Value, "%s is an alias: anchors and aliases are not supported", k.Value)
		case v.ShortTag() == "!!null" && k.Value != "descriptors":
			refuse(v, k.Value, "%s is null: give it a value or leave it out", k.Value)
		case v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				switch {
				case item.Kind == yaml.AliasNode:
					refuse(item, k.Value, "%s has an alias for an entry: anchors and aliases are not supported", k.Value)
				case item.ShortTag() == "!!null":
					refuse(item, k.Value, "%s has a null entry", k.Value)
				}
			}
		}
	}
	if errs != nil {
		return &yaml.TypeError{Errors: errs}
	}
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

// UnmarshalYAML decodes n, a YAML integer.
func (i *integer) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into int64", n.Line, n.ShortTag(), n.Value)}}
	}
	return n.Decode((*int64)(i))
}
