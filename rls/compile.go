package rls

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate"
)

// maxDepth bounds the nesting of descriptors in a configuration file; no
// request can carry more entries than MaxEntries anyway.
const maxDepth = MaxEntries

// compiler turns a decoded file into a domain, checking what the schema
// alone cannot: every error names the file, the line and the descriptor.
type compiler struct{ file string }

func (c compiler) errorf(line int, path, format string, args ...any) error {
	return &ConfigError{File: c.file, Line: line, Descriptor: path, Msg: fmt.Sprintf(format, args...)}
}

func compileFile(file string, doc *fileYAML) (*domain, error) {
	c := compiler{file}
	switch {
	case doc.Domain == "":
		return nil, c.errorf(doc.Pos.at("domain"), "", "domain is missing or empty")
	case strings.IndexByte(doc.Domain, 0) >= 0:
		return nil, c.errorf(doc.Pos.at("domain"), "", "domain has a NUL byte")
	}
	root, err := c.level(doc.Descriptors, doc.Domain, 1)
	if err != nil {
		return nil, err
	}
	return &domain{name: doc.Domain, file: file, root: root}, nil
}

func (c compiler) level(ds []descriptorYAML, path string, depth int) (*level, error) {
	l := &level{exact: map[Entry]*descriptor{}, byKey: map[string]*descriptor{}}
	if len(ds) > 0 && depth > maxDepth {
		return nil, c.errorf(ds[0].Pos.line(), path, "descriptors nested more than %d levels deep", maxDepth)
	}
	lines := map[Entry]int{}
	for i := range ds {
		y := &ds[i]
		d, err := c.descriptor(y, path, depth)
		if err != nil {
			return nil, err
		}
		id := Entry{d.key, d.value}
		if line, ok := lines[id]; ok {
			return nil, c.errorf(y.Pos.line(), joinPath(path, d.key, d.value), "duplicate descriptor: the same key and value are at line %d", line)
		}
		lines[id] = y.Pos.line()
		switch {
		case d.value == "":
			l.byKey[d.key] = d
		case d.parts != nil:
			l.wildcards = append(l.wildcards, d)
		default:
			l.exact[id] = d
		}
	}
	return l, nil
}

func joinPath(parent, key, value string) string {
	if value == "" {
		return parent + "." + key
	}
	return parent + "." + key + "_" + value
}

func (c compiler) descriptor(y *descriptorYAML, parent string, depth int) (*descriptor, error) {
	if y.Key == "" {
		return nil, c.errorf(cmp.Or(y.Pos.at("key"), y.Pos.line()), parent, "descriptor has no key (or an empty one)")
	}
	d := &descriptor{key: y.Key, value: y.Value, shared: y.ShareThreshold}
	path := joinPath(parent, d.key, d.value)
	if y.QuotaMode {
		return nil, c.errorf(y.Pos.at("quota_mode"), path, "quota_mode is not supported: every limit is enforced")
	}
	if strings.Contains(d.value, "*") {
		d.parts = strings.Split(d.value, "*")
	} else if d.shared {
		return nil, c.errorf(y.Pos.line(), path, "share_threshold needs a wildcard value (one with '*')")
	}
	var err error
	if y.RateLimit != nil {
		if d.limit, err = c.rule(y.RateLimit, path, y.ShadowMode, y.DetailedMetric); err != nil {
			return nil, err
		}
	}
	if d.children, err = c.level(y.Descriptors, path, depth+1); err != nil {
		return nil, err
	}
	return d, nil
}

// rule checks a rate_limit block against itself and compiles it.
func (c compiler) rule(y *rateLimitYAML, path string, shadow, detailed bool) (*rule, error) {
	r := &rule{path: path, name: y.Name, shadow: shadow, detailed: detailed}
	for _, rep := range y.Replaces {
		switch rep.Name {
		case "":
			return nil, c.errorf(rep.Pos.line(), path, "a replaces entry has an empty name")
		case y.Name:
			return nil, c.errorf(y.Pos.line(), path, "replaces names the descriptor's own name %q", rep.Name)
		}
		r.replaces = append(r.replaces, rep.Name)
	}
	rate := int64(y.RequestsPerUnit)
	if rate < 0 || rate > math.MaxUint32 {
		return nil, c.errorf(y.Pos.at("requests_per_unit"), path, "requests_per_unit %d is out of range (0 to %d)", rate, uint32(math.MaxUint32))
	}
	ext := y.Tollgate
	if ext != nil {
		if _, ok := algorithmNamed(ext.Algorithm); !ok {
			return nil, c.errorf(ext.Pos.at("algorithm"), path, "unknown algorithm %q (want token_bucket, gcra, sliding_window or fixed_window)", ext.Algorithm)
		}
		if ext.Burst < 0 {
			return nil, c.errorf(ext.Pos.at("burst"), path, "burst must be >= 0, got %d", ext.Burst)
		}
	}
	if y.Unlimited {
		switch {
		case y.Unit != "":
			return nil, c.errorf(y.Pos.at("unit"), path, "unlimited: true with a unit: an unlimited descriptor has none")
		case ext != nil:
			return nil, c.errorf(ext.Pos.line(), path, "unlimited: true with a %s block: an unlimited descriptor has no algorithm", ExtensionKey)
		}
		r.unlimited = true
		return r, nil
	}
	u, ok := unitNamed(y.Unit)
	if !ok {
		return nil, c.errorf(cmp.Or(y.Pos.at("unit"), y.Pos.line()), path, "invalid rate limit unit %q (want %s)", y.Unit, unitNames)
	}
	r.current = &pb.RateLimitResponse_RateLimit{Name: y.Name, RequestsPerUnit: uint32(rate), Unit: u.response}
	r.limit = tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: rate, Period: u.period}
	if ext != nil {
		if err := c.extend(&r.limit, ext, u, path); err != nil {
			return nil, err
		}
	}
	if rate == 0 {
		r.deny = true
		return r, nil
	}
	if err := r.limit.Validate(); err != nil {
		return nil, c.errorf(y.Pos.line(), path, "%v", err)
	}
	return r, nil
}

// extend applies the tollgate block to the limit of unit u.
func (c compiler) extend(limit *tollgate.Limit, ext *extensionYAML, u unit, path string) error {
	limit.Algorithm, _ = algorithmNamed(ext.Algorithm)
	if ext.Burst > 0 {
		if limit.Algorithm != tollgate.TokenBucket && limit.Algorithm != tollgate.GCRA {
			return c.errorf(ext.Pos.line(), path, "burst %d with algorithm %s: only token_bucket and gcra have a burst", ext.Burst, limit.Algorithm)
		}
		limit.Burst = int64(ext.Burst)
	}
	if ext.Calendar {
		switch {
		case limit.Algorithm != tollgate.FixedWindow:
			return c.errorf(ext.Pos.line(), path, "calendar: true with algorithm %s: only fixed_window has calendar windows", limit.Algorithm)
		case u.calendar == tollgate.NoCalendar:
			return c.errorf(ext.Pos.line(), path, "calendar: true with unit %s: calendar windows are a day, week, month or year", u.name)
		}
		limit.Period, limit.Calendar = 0, u.calendar
	}
	return nil
}

// algorithmNamed returns the algorithm of a tollgate block; "" is the
// default, fixed_window.
func algorithmNamed(name string) (tollgate.Algorithm, bool) {
	if name == "" {
		return tollgate.FixedWindow, true
	}
	for _, a := range [...]tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		if name == a.String() {
			return a, true
		}
	}
	return 0, false
}
