package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/rls"
)

// TestConfigErrors: every malformed or contradictory file is refused with
// its file, line and descriptor.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string // substring of the error, after "f.yaml:"
	}{
		{"not yaml", "domain: d\ndescriptors:\n  - key: [\n", "f.yaml:3: not valid YAML: did not find expected node content"},
		// yaml.v3 names where the enclosing block began, counted from 0;
		// the error names the line at fault.
		{"mis-indented key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n     requests_per_unit: 100\n", "f.yaml:6: not valid YAML: did not find expected key"},
		{"unclosed bracket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 100\n    value: [a, b\n  - key: p\n", "f.yaml:7: not valid YAML: did not find expected ',' or ']'"},
		{"mis-indented after a long list", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second,\n      requests_per_unit: 1}\n    value: v\n   shadow_mode: true\n", "f.yaml:7: not valid YAML: did not find expected '-' indicator"},
		{"tab", "domain: d\ndescriptors:\n\t- key: k\n", "f.yaml:3: not valid YAML: found character that cannot start any token"},
		{"unclosed quote", "domain: d\ndescriptors:\n  - key: \"k\n  - key: p\n", "f.yaml:3: not valid YAML: found unexpected end of stream"},
		{"empty", "", "f.yaml: empty file"},
		{"top is a list", "- a\n", "f.yaml:1: want a mapping"},
		{"no domain", "descriptors: []\n", "f.yaml: domain is missing"},
		{"unknown top key", "domain: d\ndescriptorz: []\n", `f.yaml:2: unknown key "descriptorz"`},
		{"descriptors not a list", "domain: d\ndescriptors: {}\n", "f.yaml:2: descriptor d: descriptors must be a list"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "f.yaml:3: descriptor d: descriptor has no key"},
		{"misspelled key", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {}\n", `f.yaml:4: descriptor d.k: unknown key "rate_limits"`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `f.yaml:6: descriptor d.k_v: invalid rate limit unit "fortnight"`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n", `f.yaml:5: descriptor d.k: invalid rate limit unit ""`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", "f.yaml:6: descriptor d.k: unlimited: true with a unit"},
		{"negative rate", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", "f.yaml:6: descriptor d.k: requests_per_unit -1 is out of range"},
		{"rate not a number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: many\n", "f.yaml:6: descriptor d.k: requests_per_unit must be an integer"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "f.yaml:5: descriptor d.k_v: duplicate descriptor: the same key and value are at line 3"},
		{"duplicate nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n", "f.yaml:6: descriptor d.a.b: duplicate descriptor"},
		{"repeated field", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    shadow_mode: false\n", `f.yaml:5: descriptor d.k: key "shadow_mode" appears twice`},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      replaces: [{name: n}]\n      unit: second\n      requests_per_unit: 1\n", `f.yaml:5: descriptor d.k: replaces names the descriptor's own name "n"`},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      replaces: [{name: ''}]\n      unit: second\n      requests_per_unit: 1\n", "f.yaml:5: descriptor d.k: a replaces entry has an empty name"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "f.yaml:3: descriptor d.k_v: share_threshold needs a wildcard"},
		{"shadow not a bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n", "f.yaml:4: descriptor d.k: shadow_mode must be true or false"},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      tollgate: {algorithm: leaky}\n", `f.yaml:7: descriptor d.k: unknown algorithm "leaky"`},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      tollgate: {burst: 5}\n", "f.yaml:7: descriptor d.k: burst 5 with algorithm fixed_window"},
		{"calendar on a bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      tollgate: {algorithm: gcra, calendar: true}\n", "f.yaml:7: descriptor d.k: calendar: true with algorithm gcra"},
		{"calendar seconds", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      tollgate: {calendar: true}\n", "f.yaml:7: descriptor d.k: calendar: true with unit second"},
		{"unlimited with extension", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      tollgate: {algorithm: gcra}\n", "f.yaml:6: descriptor d.k: unlimited: true with a tollgate block"},
		{"refill beyond MaxRefill", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      tollgate: {algorithm: token_bucket, burst: 101}\n", "f.yaml:5: descriptor d.k: token_bucket 1/8760h0m0s burst 101 takes more than MaxRefill"},
		{"alias", "domain: d\nx: &a [1]\n", `f.yaml:2: unknown key "x"`},
		{"alias descriptor", "domain: d\ndescriptors: *a\n", "not valid YAML"},
		{"non-string key", "domain: d\n1: x\n", "f.yaml:2: a key must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := rls.ParseConfig(rls.File{Name: "f.yaml", Data: []byte(c.yaml)})
			if err == nil {
				t.Fatalf("no error for:\n%s", c.yaml)
			}
			var ce *rls.ConfigError
			if !errors.Is(err, rls.ErrConfig) || !errors.As(err, &ce) {
				t.Fatalf("%v does not wrap ErrConfig as a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, c.want)
			}
		})
	}
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	f := rls.File{Name: "a.yaml", Data: []byte("domain: d\n")}
	g := rls.File{Name: "b.yaml", Data: []byte("domain: d\n")}
	_, err := rls.ParseConfig(f, g)
	if err == nil || !strings.Contains(err.Error(), `b.yaml: domain "d" is already configured in a.yaml`) {
		t.Fatalf("got %v", err)
	}
}

// TestLoadDir reads *.yaml and *.yml, skipping dot files and others.
func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: [valid")
	write("notes.txt", "not: [valid")
	cfg, err := rls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %s, want a,b", got)
	}
	write("c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n")
	if _, err := rls.LoadDir(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "c.yaml")+":4: descriptor c.k") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := rls.LoadDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing directory: no error")
	}
}

// TestREADMEFilesLoad: the README-derived files and upstream-only keys
// (value_to_metric, metadata) load unchanged.
func TestREADMEFilesLoad(t *testing.T) {
	var files []rls.File
	for i, data := range readFiles(t, "testdata/readme/*.yaml") {
		files = append(files, rls.File{Name: string(rune('a' + i)), Data: []byte(data)})
	}
	files = append(files, rls.File{Name: "extra", Data: []byte(`
domain: extra
descriptors:
  - key: route
    value_to_metric: true
    metadata:
      owner: {team: edge}
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
`)})
	cfg, err := rls.ParseConfig(files...)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cfg.Domains()); n != len(files) {
		t.Fatalf("%d domains from %d files", n, len(files))
	}
}

// TestConfigRefusesWhatDecodingWouldTake: a value YAML would decode as
// something else (a null as a zero, 1.5 as 1, an alias as its anchor's
// value) is refused, naming file, line and descriptor.
func TestConfigRefusesWhatDecodingWouldTake(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"null value":      {"domain: d\ndescriptors:\n  - key: k\n    value: ~\n", "f.yaml:4: descriptor d.k: value is null"},
		"null rate_limit": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n", "f.yaml:4: descriptor d.k: rate_limit is null"},
		"null rate":       {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: ~}\n", "f.yaml:4: descriptor d.k: requests_per_unit is null"},
		"fractional rate": {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1.5}\n", `f.yaml:6: descriptor d.a.b: requests_per_unit must be an integer, got a number "1.5"`},
		"alias":           {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: &a {unit: second, requests_per_unit: 1}\n  - key: j\n    rate_limit: *a\n", "f.yaml:6: descriptor d.j: rate_limit is an alias"},
		"alias entry":     {"domain: d\ndescriptors:\n  - &a {key: k}\n  - *a\n", "f.yaml:4: descriptor d: descriptors has an alias for an entry"},
		"null entry":      {"domain: d\ndescriptors:\n  - ~\n", "f.yaml:3: descriptor d: descriptors has a null entry"},
		"extension key":   {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, tollgate: {algo: x}}\n", `f.yaml:4: descriptor d.a: unknown key "algo" in tollgate`},
		"nested unknown":  {"domain: d\ndescriptors:\n  - descriptors:\n      - key: b\n        x: 1\n    key: a\n", `f.yaml:5: descriptor d.a.b: unknown key "x"`},
		"block kind":      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", `f.yaml:4: descriptor d.a: rate_limit must be a mapping, got an integer "5"`},
	} {
		_, err := rls.ParseConfig(rls.File{Name: "f.yaml", Data: []byte(c.yaml)})
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *ConfigError containing %q", name, err, c.want)
		}
	}
	// What is not a mistake: metadata is not read, an anchor without an
	// alias is a value, and an empty descriptors list is none.
	for _, y := range []string{"domain: d\ndescriptors:\n  - key: k\n    metadata: ~\n", "domain: &d d\n", "domain: d\ndescriptors:\n"} {
		if _, err := rls.ParseConfig(rls.File{Name: "f.yaml", Data: []byte(y)}); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}
