package rls

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
)

// maxDepth bounds the nesting of descriptors in a configuration file; no
// request can carry more entries than maxEntries anyway.
const maxDepth = maxEntries

// compiler turns a decoded file into a domain, checking what the schema
// alone cannot: every error names the file, the line and the descriptor.
type compiler struct {
	file string
	// countOver is the file's count_over_limit: the default of its
	// descriptors.
	countOver bool
	// warnings collects what loads but is likely a mistake.
	warnings *[]*ConfigError
}

func (c compiler) errorf(line int, path, format string, args ...any) error {
	return &ConfigError{File: c.file, Line: line, Descriptor: path, Msg: fmt.Sprintf(format, args...)}
}

func compileFile(file string, doc *fileYAML) (*domain, []*ConfigError, error) {
	var warnings []*ConfigError
	c := compiler{file: file, warnings: &warnings}
	if doc.Tollgate != nil {
		c.countOver = doc.Tollgate.CountOverLimit
	}
	switch {
	case doc.Domain == "":
		return nil, nil, c.errorf(doc.Pos.at("domain"), "", "domain is missing or empty")
	case strings.IndexByte(doc.Domain, 0) >= 0:
		return nil, nil, c.errorf(doc.Pos.at("domain"), "", "domain has a NUL byte")
	}
	root, err := c.level(doc.Descriptors, doc.Domain, 1)
	if err != nil {
		return nil, nil, err
	}
	return &domain{name: doc.Domain, file: file, root: root}, warnings, nil
}

// warnf records a warning at line of descriptor path.
func (c compiler) warnf(line int, path, format string, args ...any) {
	*c.warnings = append(*c.warnings, &ConfigError{File: c.file, Line: line, Descriptor: path, Msg: fmt.Sprintf(format, args...)})
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
	if strings.Contains(d.value, "*") {
		d.parts = strings.Split(d.value, "*")
	} else if d.shared {
		return nil, c.errorf(y.Pos.line(), path, "share_threshold needs a wildcard value (one with '*')")
	}
	var err error
	if y.RateLimit != nil {
		if d.limit, err = c.rule(y.RateLimit, path, y.ShadowMode, y.DetailedMetric, c.countOver); err != nil {
			return nil, err
		}
		d.limit.quota = y.QuotaMode
	}
	if d.children, err = c.level(y.Descriptors, path, depth+1); err != nil {
		return nil, err
	}
	return d, nil
}

// rule checks a rate_limit block against itself and compiles it;
// countOver is the domain's count_over_limit.
func (c compiler) rule(y *rateLimitYAML, path string, shadow, detailed, countOver bool) (*rule, error) {
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
	ext := y.Tollgate
	if y.Unlimited {
		switch {
		case y.Unit != "":
			return nil, c.errorf(y.Pos.at("unit"), path, "unlimited: true with a unit: an unlimited descriptor has none")
		case ext != nil:
			return nil, c.errorf(ext.Pos.line(), path, "unlimited: true with a %s block: an unlimited descriptor has no algorithm", extensionKey)
		}
		r.unlimited = true
		return r, nil
	}
	if y.Pos.node == nil && y.RequestsPerUnit == 0 {
		// A resource pushed over xDS: a proto3 0 and an absent field are one.
		c.warnf(0, path, "requests_per_unit is 0 or unset: every request is refused")
	} else if y.Pos.node != nil && y.Pos.at("requests_per_unit") == 0 {
		c.warnf(y.Pos.line(), path, "rate_limit has no requests_per_unit: it is read as 0 and every request is refused (write requests_per_unit: 0 if that is meant)")
	}
	own := limitYAML{RequestsPerUnit: y.RequestsPerUnit, Unit: y.Unit, Pos: y.Pos}
	extra := []limitYAML(nil)
	if ext != nil {
		own.Algorithm, own.Burst, own.Calendar, own.Period = ext.Algorithm, ext.Burst, ext.Calendar, ext.Period
		extra = ext.Limits
		countOver = countOver || ext.CountOverLimit
	}
	r.countOver = countOver
	for i, ly := range append([]limitYAML{own}, extra...) {
		l, err := c.limit(&ly, ext, i == 0, path, y.Name)
		if err != nil {
			return nil, err
		}
		if i == 0 && l.limit.Rate == 0 {
			r.deny = true
		}
		for j, o := range r.limits {
			if o.limit.Algorithm == l.limit.Algorithm && partkey.ForLimit(o.limit) == partkey.ForLimit(l.limit) {
				return nil, c.errorf(ly.Pos.line(), path, "limits %d (%s) and %d (%s) have the same algorithm and period, so they would share one state", j, o.limit, i, l.limit)
			}
		}
		r.limits = append(r.limits, l)
	}
	if len(r.limits) > tollgate.MaxAllowAll {
		return nil, c.errorf(ext.Pos.at("limits"), path, "%d limits, more than the %d one decision takes", len(r.limits), tollgate.MaxAllowAll)
	}
	if len(r.limits) > 1 {
		for i := range r.limits {
			r.limits[i].part = partkey.ForLimit(r.limits[i].limit)
		}
	}
	return r, nil
}

// limit compiles one limit of a descriptor: the rate_limit block's own
// (first; its tollgate block, ext, may give it another algorithm, a burst,
// a calendar or a period), or one of the tollgate block's limits.
func (c compiler) limit(y *limitYAML, ext *extensionYAML, first bool, path, name string) (ruleLimit, error) {
	at := y.Pos
	if first && ext != nil {
		at = ext.Pos // the algorithm, burst, calendar and period are the tollgate block's
	}
	rate := int64(y.RequestsPerUnit)
	if rate < 0 || rate > math.MaxUint32 {
		return ruleLimit{}, c.errorf(y.Pos.at("requests_per_unit"), path, "requests_per_unit %d is out of range (0 to %d)", rate, uint32(math.MaxUint32))
	}
	if !first && rate == 0 {
		return ruleLimit{}, c.errorf(y.Pos.line(), path, "a limit of the %s block needs requests_per_unit above 0", extensionKey)
	}
	alg, ok := algorithmNamed(y.Algorithm)
	if !ok {
		return ruleLimit{}, c.errorf(at.at("algorithm"), path, "unknown algorithm %q (want token_bucket, gcra, sliding_window or fixed_window)", y.Algorithm)
	}
	if y.Burst < 0 {
		return ruleLimit{}, c.errorf(at.at("burst"), path, "burst must be >= 0, got %d", y.Burst)
	}
	var u unit
	var period time.Duration
	switch {
	case y.Period != "":
		d, err := time.ParseDuration(y.Period)
		if err != nil || d <= 0 {
			return ruleLimit{}, c.errorf(at.at("period"), path, "period %q is not a positive duration such as 90s or 1h30m", y.Period)
		}
		if y.Calendar {
			return ruleLimit{}, c.errorf(at.line(), path, "calendar: true with a period: calendar windows take their length from the unit")
		}
		u, period = unitOfPeriod(d), d
	default:
		if u, ok = unitNamed(y.Unit); !ok {
			return ruleLimit{}, c.errorf(cmp.Or(y.Pos.at("unit"), y.Pos.line()), path, "invalid rate limit unit %q (want %s)", y.Unit, unitNames)
		}
		period = u.period
	}
	l := ruleLimit{
		limit:   tollgate.Limit{Algorithm: alg, Rate: rate, Period: period},
		current: &pb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(rate), Unit: u.response},
	}
	if m := period / max(u.period, 1); u.period > 0 && m > 1 {
		l.current.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
	}
	if y.Burst > 0 {
		if alg != tollgate.TokenBucket && alg != tollgate.GCRA {
			return ruleLimit{}, c.errorf(at.line(), path, "burst %d with algorithm %s: only token_bucket and gcra have a burst", y.Burst, alg)
		}
		l.limit.Burst = int64(y.Burst)
	}
	if y.Calendar {
		switch {
		case alg != tollgate.FixedWindow:
			return ruleLimit{}, c.errorf(at.line(), path, "calendar: true with algorithm %s: only fixed_window has calendar windows", alg)
		case u.calendar == tollgate.NoCalendar:
			return ruleLimit{}, c.errorf(at.line(), path, "calendar: true with unit %s: calendar windows are a day, week, month or year", u.name)
		}
		l.limit.Period, l.limit.Calendar = 0, u.calendar
	}
	if rate == 0 {
		return l, nil // requests_per_unit 0: nothing is ever admitted
	}
	if err := l.limit.Validate(); err != nil {
		// A configuration error, not a request's: the bound it breaks,
		// without the "invalid request" every Validate error starts with.
		return ruleLimit{}, c.errorf(y.Pos.line(), path, "%s", strings.TrimPrefix(err.Error(), tollgate.ErrInvalidRequest.Error()+": "))
	}
	return l, nil
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
