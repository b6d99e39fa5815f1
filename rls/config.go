package rls

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate"
)

// Config is a parsed, validated set of domains: what the server matches
// requests against. It is immutable, so a Server swaps a whole Config at
// once on reload and calls in flight keep the one they started with.
type Config struct {
	domains map[string]*domain
}

// Domains returns the configured domain names, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// File is one configuration file: its name (used in errors) and its YAML.
type File struct {
	Name string
	Data []byte
}

// MaxConfigFileSize is the largest configuration file ParseConfig accepts
// (4 MiB): a rate-limit configuration is written by people.
const MaxConfigFileSize = 4 << 20

// maxDepth bounds the nesting of descriptors in a configuration file; no
// request can carry more entries than MaxEntries anyway.
const maxDepth = MaxEntries

// ErrConfig is wrapped by every error ParseConfig and LoadDir return for a
// bad configuration; the error is a *ConfigError naming the place.
var ErrConfig = errors.New("rls: invalid configuration")

// ConfigError is a configuration mistake and where it is: the file, the
// line (0 when the whole file is at fault) and the descriptor, written as
// envoyproxy/ratelimit writes it in its statistics: the domain then each
// level's key, or key_value, joined by dots.
type ConfigError struct {
	File       string
	Line       int
	Descriptor string
	Msg        string
}

// Error returns "file:line: descriptor D: message".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Descriptor != "" {
		b.WriteString("descriptor " + e.Descriptor + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// Units of envoyproxy/ratelimit and their window lengths. Fixed windows are
// aligned to multiples of the length since the Unix epoch, as that project
// aligns them (it divides the Unix time by the unit's seconds), so a month
// is 30 days and a year 365 days, not calendar ones: the tollgate extension
// offers calendar windows.
var units = map[string]struct {
	unit   pb.RateLimitResponse_RateLimit_Unit
	period time.Duration
	cal    tollgate.Calendar
}{
	"second": {pb.RateLimitResponse_RateLimit_SECOND, time.Second, tollgate.NoCalendar},
	"minute": {pb.RateLimitResponse_RateLimit_MINUTE, time.Minute, tollgate.NoCalendar},
	"hour":   {pb.RateLimitResponse_RateLimit_HOUR, time.Hour, tollgate.NoCalendar},
	"day":    {pb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour, tollgate.Day},
	"week":   {pb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour, tollgate.Week},
	"month":  {pb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour, tollgate.Month},
	"year":   {pb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour, tollgate.Year},
}

var algorithms = map[string]tollgate.Algorithm{
	tollgate.TokenBucket.String():   tollgate.TokenBucket,
	tollgate.GCRA.String():          tollgate.GCRA,
	tollgate.SlidingWindow.String(): tollgate.SlidingWindow,
	tollgate.FixedWindow.String():   tollgate.FixedWindow,
}

// domain is one configuration file's tree.
type domain struct {
	name string
	file string
	root *level
}

// level is one list of sibling descriptors, indexed as envoyproxy/ratelimit
// looks them up: an exact key and value first, then the wildcard values in
// file order, then the key alone.
type level struct {
	exact     map[entryKey]*node
	wildcards []*node
	byKey     map[string]*node
}

type entryKey struct{ key, value string }

func (l *level) empty() bool {
	return l == nil || (len(l.exact) == 0 && len(l.wildcards) == 0 && len(l.byKey) == 0)
}

// node is one descriptor of the configuration.
type node struct {
	key, value string
	// parts is value split at '*' when the value has a wildcard.
	parts []string
	// shared: every value the wildcard matches shares one bucket
	// (share_threshold).
	shared   bool
	limit    *rule
	children *level
}

// rule is the rate_limit block of a descriptor, compiled.
type rule struct {
	// path is the descriptor's name in errors, spans and metrics:
	// "domain.key_value.key".
	path      string
	name      string
	replaces  []string
	unlimited bool
	shadow    bool
	detailed  bool
	// deny: requests_per_unit is 0, nothing is ever admitted.
	deny  bool
	limit tollgate.Limit
	// current is the limit as the response reports it; shared by every
	// response, never modified.
	current *pb.RateLimitResponse_RateLimit
}

// LoadDir parses every *.yaml and *.yml file in dir (not its
// subdirectories; files whose names start with a dot are skipped), one
// domain per file.
func LoadDir(dir string) (*Config, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rls: reading configuration directory: %w", err)
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		if info.Size() > MaxConfigFileSize {
			return nil, &ConfigError{File: path, Msg: fmt.Sprintf("%d bytes, more than %d", info.Size(), MaxConfigFileSize)}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		files = append(files, File{Name: path, Data: data})
	}
	return ParseConfig(files...)
}

// ParseConfig parses configuration files in envoyproxy/ratelimit's format,
// one domain per file. Two files naming the same domain are an error, as in
// that project by default. Every error is a *ConfigError wrapping
// ErrConfig.
func ParseConfig(files ...File) (*Config, error) {
	c := &Config{domains: map[string]*domain{}}
	for _, f := range files {
		d, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		if prev, ok := c.domains[d.name]; ok {
			return nil, &ConfigError{File: f.Name, Msg: fmt.Sprintf("domain %q is already configured in %s", d.name, prev.file)}
		}
		c.domains[d.name] = d
	}
	return c, nil
}

// parser holds the file being parsed, for errors.
type parser struct {
	file   string
	domain string
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Descriptor: path, Msg: fmt.Sprintf(format, args...)}
}

func parseFile(f File) (*domain, error) {
	p := &parser{file: f.Name}
	if len(f.Data) > MaxConfigFileSize {
		return nil, p.errorf(nil, "", "%d bytes, more than %d", len(f.Data), MaxConfigFileSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		return nil, syntaxError(f.Name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errorf(nil, "", "empty file: want a mapping with domain and descriptors")
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, p.errorf(top, "", "want a mapping with domain and descriptors, got %s", kindName(top))
	}
	var descriptors *yaml.Node
	var domainNode *yaml.Node
	err := p.fields(top, "", func(k string, v *yaml.Node) error {
		switch k {
		case "domain":
			domainNode = v
			return p.str(v, "", k, &p.domain)
		case "descriptors":
			descriptors = v
			return nil
		}
		return p.errorf(v, "", "unknown key %q (want domain or descriptors)", k)
	})
	if err != nil {
		return nil, err
	}
	switch {
	case p.domain == "":
		return nil, p.errorf(domainNode, "", "domain is missing or empty")
	case strings.IndexByte(p.domain, 0) >= 0:
		return nil, p.errorf(domainNode, "", "domain has a NUL byte")
	}
	root, err := p.level(descriptors, p.domain, 1)
	if err != nil {
		return nil, err
	}
	return &domain{name: p.domain, file: f.Name, root: root}, nil
}

// syntaxError is a ConfigError for a YAML syntax error, with the line
// yaml.v3 names in its message ("yaml: line 3: ...") moved to Line.
func syntaxError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, after
			}
		}
	}
	return &ConfigError{File: file, Line: line, Msg: "not valid YAML: " + msg}
}

// fields calls fn for each key of the mapping n, rejecting non-string and
// repeated keys.
func (p *parser) fields(n *yaml.Node, path string, fn func(key string, value *yaml.Node) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return p.errorf(k, path, "a key must be a string, got %s", kindName(k))
		}
		if seen[k.Value] {
			return p.errorf(k, path, "key %q appears twice", k.Value)
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) level(n *yaml.Node, path string, depth int) (*level, error) {
	l := &level{exact: map[entryKey]*node{}, byKey: map[string]*node{}}
	if n == nil || n.Tag == "!!null" {
		return l, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "descriptors must be a list, got %s", kindName(n))
	}
	if depth > maxDepth {
		return nil, p.errorf(n, path, "descriptors nested more than %d levels deep", maxDepth)
	}
	lines := map[entryKey]int{}
	for _, item := range n.Content {
		d, err := p.descriptor(item, path, depth)
		if err != nil {
			return nil, err
		}
		id := entryKey{d.key, d.value}
		if line, ok := lines[id]; ok {
			return nil, p.errorf(item, joinPath(path, d.key, d.value), "duplicate descriptor: the same key and value are at line %d", line)
		}
		lines[id] = item.Line
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

// yamlLimit is a rate_limit block as written.
type yamlLimit struct {
	node            *yaml.Node
	unit            string
	unitNode        *yaml.Node
	requestsPerUnit int64
	unlimited       bool
	name            string
	replaces        []string
	ext             *yamlExtension
}

// yamlExtension is the tollgate block inside rate_limit.
type yamlExtension struct {
	node      *yaml.Node
	algorithm string
	burst     int64
	calendar  bool
}

func (p *parser) descriptor(n *yaml.Node, parent string, depth int) (*node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, parent, "a descriptor must be a mapping with a key, got %s", kindName(n))
	}
	d := &node{}
	var (
		keyNode, children *yaml.Node
		lim               *yamlLimit
		shadow, detailed  bool
		unused            bool
	)
	// The path is known only once key and value are read; errors in other
	// fields are reported with it, so read key and value first.
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "key":
			keyNode = n.Content[i+1]
			if err := p.str(keyNode, parent, "key", &d.key); err != nil {
				return nil, err
			}
		case "value":
			if err := p.str(n.Content[i+1], parent, "value", &d.value); err != nil {
				return nil, err
			}
		}
	}
	if d.key == "" {
		line := n
		if keyNode != nil {
			line = keyNode
		}
		return nil, p.errorf(line, parent, "descriptor has no key (or an empty one)")
	}
	path := joinPath(parent, d.key, d.value)
	err := p.fields(n, path, func(k string, v *yaml.Node) error {
		switch k {
		case "key", "value":
			return nil
		case "rate_limit":
			var err error
			lim, err = p.rateLimit(v, path)
			return err
		case "descriptors":
			children = v
			return nil
		case "shadow_mode":
			return p.boolean(v, path, k, &shadow)
		case "detailed_metric":
			return p.boolean(v, path, k, &detailed)
		case "share_threshold":
			return p.boolean(v, path, k, &d.shared)
		case "value_to_metric":
			// Metric naming only; tollgate's metrics name the descriptor
			// by its configuration path.
			return p.boolean(v, path, k, &unused)
		case "metadata":
			// Response metadata is not produced; the block is accepted so
			// that existing files load.
			return nil
		case "quota_mode":
			var q bool
			if err := p.boolean(v, path, k, &q); err != nil {
				return err
			}
			if q {
				return p.errorf(v, path, "quota_mode is not supported: every limit is enforced")
			}
			return nil
		}
		return p.errorf(v, path, "unknown key %q", k)
	})
	if err != nil {
		return nil, err
	}
	if strings.Contains(d.value, "*") {
		d.parts = strings.Split(d.value, "*")
	} else if d.shared {
		return nil, p.errorf(n, path, "share_threshold needs a wildcard value (one with '*')")
	}
	if lim != nil {
		d.limit, err = p.compile(lim, path, shadow, detailed)
		if err != nil {
			return nil, err
		}
	}
	if d.children, err = p.level(children, path, depth+1); err != nil {
		return nil, err
	}
	return d, nil
}

func (p *parser) rateLimit(n *yaml.Node, path string) (*yamlLimit, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, path, "rate_limit must be a mapping, got %s", kindName(n))
	}
	l := &yamlLimit{node: n}
	err := p.fields(n, path, func(k string, v *yaml.Node) error {
		switch k {
		case "unit":
			l.unitNode = v
			return p.str(v, path, k, &l.unit)
		case "requests_per_unit":
			if err := p.integer(v, path, k, &l.requestsPerUnit); err != nil {
				return err
			}
			if l.requestsPerUnit < 0 || l.requestsPerUnit > math.MaxUint32 {
				return p.errorf(v, path, "requests_per_unit %d is out of range (0 to %d)", l.requestsPerUnit, uint32(math.MaxUint32))
			}
			return nil
		case "unlimited":
			return p.boolean(v, path, k, &l.unlimited)
		case "name":
			return p.str(v, path, k, &l.name)
		case "replaces":
			return p.replaces(v, path, l)
		case ExtensionKey:
			var err error
			l.ext, err = p.extension(v, path)
			return err
		}
		return p.errorf(v, path, "unknown key %q in rate_limit", k)
	})
	return l, err
}

func (p *parser) replaces(n *yaml.Node, path string, l *yamlLimit) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, path, "replaces must be a list of {name: ...}, got %s", kindName(n))
	}
	for _, item := range n.Content {
		if item.Kind != yaml.MappingNode {
			return p.errorf(item, path, "a replaces entry must be a mapping with a name, got %s", kindName(item))
		}
		var name string
		err := p.fields(item, path, func(k string, v *yaml.Node) error {
			if k != "name" {
				return p.errorf(v, path, "unknown key %q in replaces", k)
			}
			return p.str(v, path, k, &name)
		})
		if err != nil {
			return err
		}
		if name == "" {
			return p.errorf(item, path, "a replaces entry has an empty name")
		}
		l.replaces = append(l.replaces, name)
	}
	return nil
}

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

func (p *parser) extension(n *yaml.Node, path string) (*yamlExtension, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, path, "%s must be a mapping, got %s", ExtensionKey, kindName(n))
	}
	e := &yamlExtension{node: n}
	err := p.fields(n, path, func(k string, v *yaml.Node) error {
		switch k {
		case "algorithm":
			if err := p.str(v, path, k, &e.algorithm); err != nil {
				return err
			}
			if _, ok := algorithms[e.algorithm]; !ok {
				return p.errorf(v, path, "unknown algorithm %q (want token_bucket, gcra, sliding_window or fixed_window)", e.algorithm)
			}
			return nil
		case "burst":
			if err := p.integer(v, path, k, &e.burst); err != nil {
				return err
			}
			if e.burst < 0 {
				return p.errorf(v, path, "burst must be >= 0, got %d", e.burst)
			}
			return nil
		case "calendar":
			return p.boolean(v, path, k, &e.calendar)
		}
		return p.errorf(v, path, "unknown key %q in %s (want algorithm, burst or calendar)", k, ExtensionKey)
	})
	return e, err
}

// compile checks a rate_limit block against itself and turns it into a
// rule.
func (p *parser) compile(l *yamlLimit, path string, shadow, detailed bool) (*rule, error) {
	r := &rule{path: path, name: l.name, replaces: l.replaces, shadow: shadow, detailed: detailed}
	for _, name := range l.replaces {
		if name == l.name {
			return nil, p.errorf(l.node, path, "replaces names the descriptor's own name %q", name)
		}
	}
	u, validUnit := units[strings.ToLower(l.unit)]
	if l.unlimited {
		if l.unit != "" {
			return nil, p.errorf(l.unitNode, path, "unlimited: true with a unit: an unlimited descriptor has none")
		}
		if l.ext != nil {
			return nil, p.errorf(l.ext.node, path, "unlimited: true with a %s block: an unlimited descriptor has no algorithm", ExtensionKey)
		}
		r.unlimited = true
		return r, nil
	}
	if !validUnit {
		line := l.unitNode
		if line == nil {
			line = l.node
		}
		return nil, p.errorf(line, path, "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", l.unit)
	}
	r.current = &pb.RateLimitResponse_RateLimit{Name: l.name, RequestsPerUnit: uint32(l.requestsPerUnit), Unit: u.unit}
	r.limit = tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: l.requestsPerUnit, Period: u.period}
	if e := l.ext; e != nil {
		if e.algorithm != "" {
			r.limit.Algorithm = algorithms[e.algorithm]
		}
		if e.burst > 0 {
			if r.limit.Algorithm != tollgate.TokenBucket && r.limit.Algorithm != tollgate.GCRA {
				return nil, p.errorf(e.node, path, "burst %d with algorithm %s: only token_bucket and gcra have a burst", e.burst, r.limit.Algorithm)
			}
			r.limit.Burst = e.burst
		}
		if e.calendar {
			switch {
			case r.limit.Algorithm != tollgate.FixedWindow:
				return nil, p.errorf(e.node, path, "calendar: true with algorithm %s: only fixed_window has calendar windows", r.limit.Algorithm)
			case u.cal == tollgate.NoCalendar:
				return nil, p.errorf(e.node, path, "calendar: true with unit %s: calendar windows are a day, week, month or year", l.unit)
			}
			r.limit.Period, r.limit.Calendar = 0, u.cal
		}
	}
	if l.requestsPerUnit == 0 {
		r.deny = true
		return r, nil
	}
	if err := r.limit.Validate(); err != nil {
		return nil, p.errorf(l.node, path, "%v", err)
	}
	return r, nil
}

func (p *parser) str(n *yaml.Node, path, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errorf(n, path, "%s must be a string, got %s", field, kindName(n))
	}
	*dst = n.Value
	return nil
}

func (p *parser) boolean(n *yaml.Node, path, field string, dst *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errorf(n, path, "%s must be true or false, got %s %q", field, kindName(n), n.Value)
	}
	return n.Decode(dst)
}

func (p *parser) integer(n *yaml.Node, path, field string, dst *int64) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return p.errorf(n, path, "%s must be an integer, got %s %q", field, kindName(n), n.Value)
	}
	if err := n.Decode(dst); err != nil {
		return p.errorf(n, path, "%s: %v", field, err)
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias (anchors and aliases are not supported)"
	case yaml.ScalarNode:
		switch n.Tag {
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
		return "a scalar " + n.Tag
	}
	return "nothing"
}
