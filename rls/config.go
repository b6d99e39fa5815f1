package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate"
)

// Config is a parsed, validated set of domains: what the server matches
// requests against. It is immutable, so a Server swaps a whole Config at
// once on reload and calls in flight keep the one they started with.
type Config struct {
	domains  map[string]*domain
	warnings []*ConfigError
}

func newConfig() *Config { return &Config{domains: map[string]*domain{}} }

// Warnings returns what the configuration holds that loads but is likely a
// mistake, each with its file (or resource), line and descriptor: a
// rate_limit without requests_per_unit, which envoyproxy/ratelimit and
// tollgate read as a limit of 0 that refuses every request.
func (c *Config) Warnings() []*ConfigError {
	if c == nil {
		return nil
	}
	return c.warnings
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

// maxConfigFileSize is the largest configuration file ParseConfig accepts
// (4 MiB): a rate-limit configuration is written by people.
const maxConfigFileSize = 4 << 20

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
		if info.Size() > maxConfigFileSize {
			return nil, &ConfigError{File: path, Msg: fmt.Sprintf("%d bytes, more than %d", info.Size(), maxConfigFileSize)}
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
	c := newConfig()
	for _, f := range files {
		if len(f.Data) > maxConfigFileSize {
			return nil, &ConfigError{File: f.Name, Msg: fmt.Sprintf("%d bytes, more than %d", len(f.Data), maxConfigFileSize)}
		}
		doc, err := decodeFile(f)
		if err != nil {
			return nil, err
		}
		if err := c.add(doc, f.Name); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// add compiles one decoded file (compile.go) into c: its domain must be
// new.
func (c *Config) add(doc *fileYAML, file string) error {
	d, warnings, err := compileFile(file, doc)
	if err != nil {
		return err
	}
	if prev, ok := c.domains[d.name]; ok {
		return &ConfigError{File: file, Msg: fmt.Sprintf("domain %q is already configured in %s", d.name, prev.file)}
	}
	c.domains[d.name] = d
	c.warnings = append(c.warnings, warnings...)
	return nil
}

// domain is one configuration file, compiled.
type domain struct {
	name string
	file string
	root *level
}

// level is one list of sibling descriptors, indexed as envoyproxy/ratelimit
// looks them up: an exact key and value first, then the wildcard values in
// file order, then the key alone.
type level struct {
	exact     map[Entry]*descriptor
	wildcards []*descriptor
	byKey     map[string]*descriptor
}

func (l *level) empty() bool {
	return l == nil || (len(l.exact) == 0 && len(l.wildcards) == 0 && len(l.byKey) == 0)
}

// descriptor is one descriptor of the configuration, compiled.
type descriptor struct {
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
	// quota: quota_mode, over the limit is answered OK and reported in
	// the dynamic metadata.
	quota    bool
	detailed bool
	// deny: requests_per_unit is 0, nothing is ever admitted.
	deny bool
	// countOver: hits are counted even over the limit (count_over_limit).
	countOver bool
	// limits are the rate_limit block's own, then the tollgate block's.
	limits []ruleLimit
}

// ruleLimit is one limit of a rule.
type ruleLimit struct {
	limit tollgate.Limit
	// current is the limit as the response reports it; shared by every
	// response, never modified.
	current *pb.RateLimitResponse_RateLimit
	// part names the limit's state within the descriptor's key
	// (partkey.ForLimit); empty when the rule has one limit.
	part string
}
