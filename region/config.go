package region

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
)

// Defaults used when a Config field is zero.
const (
	// defaultRebalance is how often a region reports its demand and renews
	// its shares.
	defaultRebalance = time.Second
	// defaultClockSkew bounds how far the Home's clock may gain on a
	// region's over one lease, and how far a region's process clock may be
	// from its own store's.
	defaultClockSkew = 200 * time.Millisecond
	// defaultMaxKeys is how many identities a region shares at once.
	defaultMaxKeys = 10_000
)

// maxNameLen is the longest region name.
const maxNameLen = 64

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// cannot run with.
var ErrInvalidConfig = errors.New("region: invalid configuration")

// Config configures a Region (New). Region, Regions and Limits are
// required; every other field's zero value is its default.
type Config struct {
	// Region names this region: 1 to 64 letters, digits, '-', '_'
	// or '.'.
	Region string
	// Regions names every region sharing the limits, this one included.
	// Every region must be given the same list (and the same Floor): the
	// Home refuses a report that disagrees with the others'.
	Regions []string
	// Limits are the global limits shared: a request under another limit
	// is refused (tollgate.ErrInvalidRequest). A TokenBucket or GCRA limit
	// is shared as a rate and a burst, a FixedWindow one (of a period or a
	// calendar unit) as the units of each window; SlidingWindow is not
	// shared. Each needs a Rate of at least one unit of floor per region.
	Limits []tollgate.Limit
	// Rebalance is how often the region reports its demand and renews its
	// shares: 1s when 0, at least 10ms.
	Rebalance time.Duration
	// Lease is how long a share of a rate lasts when it is not renewed: 3
	// × Rebalance by default, at least Rebalance + ClockSkew. A region cut
	// off from the Home keeps its share this long, and the Home gives it
	// to no other region before then.
	Lease time.Duration
	// ClockSkew bounds how far the Home's clock may gain on this region's
	// over one Lease, plus how long a local decision may take: a region
	// stops using a lease ClockSkew before the Home ends it. It also bounds
	// how far this process's clock is from its store's: around a window's
	// boundary, for ClockSkew either side, the region decides under its
	// floor. 200ms when 0; negative is an error.
	ClockSkew time.Duration
	// Floor is the fraction of each rate every region keeps when it holds
	// no lease (it starts with it, and falls back to it when cut off),
	// reserved out of the limit: 1/(10 × len(Regions)) by default, at most
	// 1/len(Regions), and never less than one unit.
	Floor float64
	// WindowFloor is the same for windows: what a region may admit in a
	// window before its first share of it (a window's share lasts to its
	// end, so a region cut off keeps it). It is reserved in every window
	// and lost when a region admits less: 1/(1000 × len(Regions)) by
	// default, so that the regions can use 99.9% of a window.
	WindowFloor float64
	// MaxKeys bounds how many identities the region shares at once
	// (10,000 when 0); beyond them, an identity is decided under its floor
	// until one leaves.
	MaxKeys int
	// MeterProvider is where the region's metrics go (default the global
	// otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
}

// settings is a Config checked and completed with its defaults.
type settings struct {
	name      string
	regions   int
	rebalance time.Duration
	lease     time.Duration
	skew      time.Duration
	maxKeys   int
	samples   int // the intervals a demand is measured over: a lease's
	limits    map[tollgate.Limit]*shared
}

// check returns c's settings, or an error wrapping ErrInvalidConfig that
// names the field and the value at fault.
func (c Config) check() (settings, error) {
	s := settings{name: c.Region, regions: len(c.Regions), rebalance: c.Rebalance, lease: c.Lease, skew: c.ClockSkew, maxKeys: c.MaxKeys}
	if err := checkName(c.Region); err != nil {
		return s, configErr("Region %q: %v", c.Region, err)
	}
	seen := make(map[string]bool, len(c.Regions))
	for _, n := range c.Regions {
		if err := checkName(n); err != nil {
			return s, configErr("Regions: %q: %v", n, err)
		}
		if seen[n] {
			return s, configErr("Regions: %q is named twice", n)
		}
		seen[n] = true
	}
	if !seen[c.Region] {
		return s, configErr("Regions %q do not name this region %q", c.Regions, c.Region)
	}
	if s.rebalance == 0 {
		s.rebalance = defaultRebalance
	}
	if s.skew == 0 {
		s.skew = defaultClockSkew
	}
	if s.lease == 0 {
		s.lease = 3 * s.rebalance
	}
	if s.maxKeys == 0 {
		s.maxKeys = defaultMaxKeys
	}
	if s.rebalance > 0 {
		s.samples = min(max(1, int(s.lease/s.rebalance)), maxSamples)
	}
	floor, windowFloor := c.Floor, c.WindowFloor
	if floor == 0 {
		floor = 1 / (10 * float64(s.regions))
	}
	if windowFloor == 0 {
		windowFloor = 1 / (1000 * float64(s.regions))
	}
	switch {
	case s.rebalance < 10*time.Millisecond:
		return s, configErr("Rebalance %s: want at least 10ms", s.rebalance)
	case s.skew < 0:
		return s, configErr("ClockSkew %s: want 0 (the default) or more", s.skew)
	case s.lease < s.rebalance:
		return s, configErr("Lease %s is shorter than the rebalance interval %s: a share would end before it is renewed", s.lease, s.rebalance)
	case s.lease < s.rebalance+s.skew:
		return s, configErr("Lease %s is shorter than the rebalance interval %s plus the clock skew %s: a share would end here before it is renewed", s.lease, s.rebalance, s.skew)
	case s.maxKeys < 0:
		return s, configErr("MaxKeys %d: want 0 (the default) or more", s.maxKeys)
	case !(floor > 0 && floor <= 1/float64(s.regions)):
		return s, configErr("Floor %g: want more than 0 and at most 1/%d, one region's part of the limit", floor, s.regions)
	case !(windowFloor > 0 && windowFloor <= 1/float64(s.regions)):
		return s, configErr("WindowFloor %g: want more than 0 and at most 1/%d, one region's part of the limit", windowFloor, s.regions)
	case len(c.Limits) == 0:
		return s, configErr("Limits: none given")
	}
	s.limits = make(map[tollgate.Limit]*shared, len(c.Limits))
	for _, l := range c.Limits {
		f := floor
		if l.Algorithm == tollgate.FixedWindow {
			f = windowFloor
		}
		sh, err := newShared(l, s, f)
		if err != nil {
			return s, configErr("limit %s: %v", l, err)
		}
		s.limits[sh.limit] = sh
	}
	return s, nil
}

// checkName reports whether n can name a region.
func checkName(n string) error {
	switch {
	case n == "":
		return errors.New("a region name is empty")
	case len(n) > maxNameLen:
		return fmt.Errorf("a region name is %d bytes, more than %d", len(n), maxNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("byte 0x%02x at %d: a region name is letters, digits, '-', '_' and '.'", c, i)
		}
	}
	return nil
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
