package rls

import (
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// ParseRateLimitConfigs compiles RateLimitConfig resources, the form in
// which Envoy Gateway's controller pushes envoyproxy/ratelimit's
// configuration over xDS (resource type
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig), with
// the checks of ParseConfig: each resource is one domain, and an error is a
// *ConfigError whose File is the resource's name. The resource has no
// lines, so errors and warnings name the resource and the descriptor.
func ParseRateLimitConfigs(resources ...*rlsconf.RateLimitConfig) (*Config, error) {
	c := newConfig()
	for _, r := range resources {
		name := r.GetName()
		if name == "" {
			name = "resource for domain " + r.GetDomain()
		}
		if err := c.add(fileOfResource(r), name); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// fileOfResource is r in the schema of a configuration file: the same
// fields, without the keys the proto does not have.
func fileOfResource(r *rlsconf.RateLimitConfig) *fileYAML {
	return &fileYAML{Domain: r.GetDomain(), Descriptors: descriptorsOfResource(r.GetDescriptors())}
}

func descriptorsOfResource(ds []*rlsconf.RateLimitDescriptor) []descriptorYAML {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptorYAML, len(ds))
	for i, d := range ds {
		out[i] = descriptorYAML{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			Descriptors:    descriptorsOfResource(d.GetDescriptors()),
		}
		if p := d.GetRateLimit(); p != nil {
			rl := &rateLimitYAML{RequestsPerUnit: integer(p.GetRequestsPerUnit()), Unlimited: p.GetUnlimited(), Name: p.GetName()}
			if p.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
				// The reference writes the unit's enum name; an unknown
				// number is refused as an unknown unit.
				rl.Unit = strings.ToLower(p.GetUnit().String())
				if _, ok := rlsconf.RateLimitUnit_name[int32(p.GetUnit())]; !ok {
					rl.Unit = fmt.Sprintf("unit number %d", int32(p.GetUnit()))
				}
			}
			for _, rep := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, replacesYAML{Name: rep.GetName()})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}
