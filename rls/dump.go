package rls

import (
	"encoding/json"
	"slices"
	"strings"
)

// MarshalJSON describes the loaded configuration, for operators: each
// domain with its file and its descriptors as they were compiled, their
// limits described as tollgate.Limit.String does ("fixed_window 10/1m0s").
// tollgate-rls serves it on its metrics listener.
func (c *Config) MarshalJSON() ([]byte, error) {
	type dumped struct {
		Domain      string           `json:"domain"`
		File        string           `json:"file"`
		Descriptors []dumpDescriptor `json:"descriptors,omitempty"`
	}
	out := []dumped{}
	for _, name := range c.Domains() {
		d := c.domains[name]
		out = append(out, dumped{Domain: d.name, File: d.file, Descriptors: dumpLevel(d.root)})
	}
	return json.Marshal(out)
}

// dumpDescriptor is one descriptor of the dump.
type dumpDescriptor struct {
	Key            string           `json:"key"`
	Value          string           `json:"value,omitempty"`
	Name           string           `json:"name,omitempty"`
	Limits         []string         `json:"limits,omitempty"`
	Unlimited      bool             `json:"unlimited,omitempty"`
	Shadow         bool             `json:"shadow_mode,omitempty"`
	Quota          bool             `json:"quota_mode,omitempty"`
	CountOverLimit bool             `json:"count_over_limit,omitempty"`
	Replaces       []string         `json:"replaces,omitempty"`
	ShareThreshold bool             `json:"share_threshold,omitempty"`
	Descriptors    []dumpDescriptor `json:"descriptors,omitempty"`
}

// dumpLevel returns l's descriptors, sorted by key and value.
func dumpLevel(l *level) []dumpDescriptor {
	if l.empty() {
		return nil
	}
	var all []*descriptor
	for _, d := range l.exact {
		all = append(all, d)
	}
	all = append(all, l.wildcards...)
	for _, d := range l.byKey {
		all = append(all, d)
	}
	slices.SortFunc(all, func(a, b *descriptor) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	out := make([]dumpDescriptor, 0, len(all))
	for _, d := range all {
		dd := dumpDescriptor{Key: d.key, Value: d.value, ShareThreshold: d.shared, Descriptors: dumpLevel(d.children)}
		if r := d.limit; r != nil {
			dd.Name, dd.Unlimited, dd.Shadow, dd.Quota, dd.CountOverLimit, dd.Replaces = r.name, r.unlimited, r.shadow, r.quota, r.countOver, r.replaces
			for _, l := range r.limits {
				dd.Limits = append(dd.Limits, l.limit.String())
			}
		}
		out = append(out, dd)
	}
	return out
}
