package rls_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/tollgate/tollgate/rls"
)

// resource is a RateLimitConfig as Envoy Gateway's controller builds it.
func resource(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

func limited(key, value string, unit rlsconf.RateLimitUnit, n uint32, children ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, Value: value, RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}, Descriptors: children}
}

// TestRateLimitConfigsLoadAsYAML: a resource compiles to what the same
// configuration written as a file compiles to.
func TestRateLimitConfigsLoadAsYAML(t *testing.T) {
	fromXDS, err := rls.ParseRateLimitConfigs(resource("default/eg/route", "gw",
		&rlsconf.RateLimitDescriptor{Key: "route", Value: "r1", Descriptors: []*rlsconf.RateLimitDescriptor{
			limited("user", "", rlsconf.RateLimitUnit_MINUTE, 5),
			{Key: "vip", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 7, Name: "v", Replaces: []*rlsconf.RateLimitReplace{{Name: "w"}}}},
			{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		}}))
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := rls.ParseConfig(rls.File{Name: "default/eg/route", Data: []byte(`
domain: gw
descriptors:
  - key: route
    value: r1
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
      - key: vip
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 7, name: v, replaces: [{name: w}]}
      - key: free
        rate_limit: {unlimited: true}
`)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromXDS)
	b, _ := json.Marshal(fromFile)
	if string(a) != string(b) {
		t.Fatalf("over xDS:\n%s\nfrom a file:\n%s", a, b)
	}
}

// TestRateLimitConfigErrorsNameTheResource: what envoyproxy/ratelimit
// refuses (and NACKs) is refused, naming the resource and the descriptor.
func TestRateLimitConfigErrorsNameTheResource(t *testing.T) {
	for name, tc := range map[string]struct {
		resources []*rlsconf.RateLimitConfig
		want      string
	}{
		"unknown unit":      {[]*rlsconf.RateLimitConfig{resource("r", "d", limited("k", "", rlsconf.RateLimitUnit_UNKNOWN, 5))}, `r: descriptor d.k: invalid rate limit unit ""`},
		"unit out of range": {[]*rlsconf.RateLimitConfig{resource("r", "d", limited("k", "", 42, 5))}, `r: descriptor d.k: invalid rate limit unit "unit number 42"`},
		"empty key":         {[]*rlsconf.RateLimitConfig{resource("r", "d", limited("", "", rlsconf.RateLimitUnit_SECOND, 5))}, "r: descriptor d: descriptor has no key"},
		"duplicate key":     {[]*rlsconf.RateLimitConfig{resource("r", "d", limited("k", "v", rlsconf.RateLimitUnit_SECOND, 5), limited("k", "v", rlsconf.RateLimitUnit_SECOND, 6))}, "r: descriptor d.k_v: duplicate descriptor"},
		"unlimited with unit": {[]*rlsconf.RateLimitConfig{resource("r", "d", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_DAY}})},
			"r: descriptor d.k: unlimited: true with a unit"},
		"replaces itself": {[]*rlsconf.RateLimitConfig{resource("r", "d", &rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1, Name: "n", Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}})},
			`r: descriptor d.k: replaces names the descriptor's own name "n"`},
		"domain twice": {[]*rlsconf.RateLimitConfig{resource("a", "d"), resource("b", "d")}, `b: domain "d" is already configured in a`},
		"no domain":    {[]*rlsconf.RateLimitConfig{resource("r", "")}, "r: domain is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rls.ParseRateLimitConfigs(tc.resources...)
			var ce *rls.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rls.ErrConfig) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want a *rls.ConfigError starting %q", err, tc.want)
			}
		})
	}
}

// TestMissingRequestsPerUnitWarns: a rate_limit without requests_per_unit
// loads as a limit of 0, as envoyproxy/ratelimit reads it, and is reported
// with its file and line, or its resource.
func TestMissingRequestsPerUnitWarns(t *testing.T) {
	c, err := rls.ParseConfig(rls.File{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n  - key: zero\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n")})
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warnings()
	if len(w) != 1 || w[0].Error() != "f.yaml:5: descriptor d.k: rate_limit has no requests_per_unit: it is read as 0 and every request is refused (write requests_per_unit: 0 if that is meant)" {
		t.Fatalf("warnings %v, want one for d.k at line 5 (an explicit 0 says what it means)", w)
	}
	c, err = rls.ParseRateLimitConfigs(resource("default/eg", "d", limited("k", "", rlsconf.RateLimitUnit_SECOND, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 1 || w[0].Error() != "default/eg: descriptor d.k: requests_per_unit is 0 or unset: every request is refused" {
		t.Fatalf("warnings %v, want one naming the resource", w)
	}
}
