package lease

import (
	"fmt"
	"time"
)

// Defaults used when an option is not given.
const (
	// defaultLifetime is how long a lease may be spent after it was taken.
	defaultLifetime = time.Second
	// defaultHotDecisions and defaultHotInterval make an identity hot once
	// it was decided more than 100 times within one second.
	defaultHotDecisions = 100
	defaultHotInterval  = time.Second
	// defaultMaxShare is the largest fraction of a limit's capacity one
	// lease may hold: 1%.
	defaultMaxShare = 0.01
	// defaultMaxLeases is how many identities hold a lease at once.
	defaultMaxLeases = 1024
)

// minLease is the smallest lease worth a round trip: below two units a
// lease saves nothing over a decision of its own.
const minLease = 2

// hotCells is the size of the table counting decisions per identity; two
// identities sharing a cell count together (see hotCounter).
const hotCells = 4096

// Option configures a Store (New).
type Option func(*config)

type config struct {
	lifetime    time.Duration
	hotN        int64
	hotInterval time.Duration
	maxShare    float64
	maxLeases   int
	clock       func() time.Time
	// debitRetries: hot requests carrying a RequestID are admitted from
	// leases too (WithDebitRetriesWhenHot).
	debitRetries bool
}

func defaults() config {
	return config{
		lifetime:    defaultLifetime,
		hotN:        defaultHotDecisions,
		hotInterval: defaultHotInterval,
		maxShare:    defaultMaxShare,
		maxLeases:   defaultMaxLeases,
		clock:       time.Now,
	}
}

// WithLifetime sets how long a lease may be spent after it was taken
// (default 1s, at least 1ms and at most one minute). Units of
// a lease not spent within it are lost to the identity, and the Remaining
// of a decision admitted from a lease is at most this old. Leases are sized
// to last about a quarter of it at the identity's observed rate.
func WithLifetime(d time.Duration) Option { return func(c *config) { c.lifetime = d } }

// WithHotThreshold makes an identity lease once it was decided more than n
// times within one interval (default 100 within
// one second); colder identities go straight to the inner store.
// n = 0 makes every identity lease from its first decision. The interval
// is between 1ms and one minute.
func WithHotThreshold(n int64, interval time.Duration) Option {
	return func(c *config) { c.hotN, c.hotInterval = n, interval }
}

// WithMaxShare bounds one lease to the fraction f of the limit's capacity
// (Limit.Capacity; default 0.01), 0 < f ≤ 0.5. A replica holds
// at most two leases of an identity (the one being spent and the next), so
// with r replicas at most 2×r×f of its capacity is held in leases at any
// time: the most one replica at the limit can be refused while others hold
// units they have not spent yet. A limit whose capacity × f is below two
// units is not leased.
func WithMaxShare(f float64) Option { return func(c *config) { c.maxShare = f } }

// WithMaxLeases bounds how many identities hold leases at once (default
// 1024). When a new identity turns hot and the table is full,
// it takes the place of the identity that asked for a lease longest ago if
// that was more than a lifetime ago (its leases have expired: nothing is
// lost); otherwise it is decided on the inner store, as without the tier,
// until a place is free.
func WithMaxLeases(n int) Option { return func(c *config) { c.maxLeases = n } }

// WithDebitRetriesWhenHot lets requests carrying a RequestID be admitted
// from a lease when their identity is hot, their id ignored: a retry is
// then debited again rather than replayed, and Replayed is never reported
// for them. That never admits more than the quota; it charges a retried
// call once per attempt (at most the client's retry attempts). Without it
// (the default) every request with an id goes to the inner store, which
// alone knows whether the id was admitted on another replica, so a tier in
// front of clients that stamp every call with an id (package idempotency)
// admits nothing from leases. Cold identities keep their ids either way.
func WithDebitRetriesWhenHot() Option { return func(c *config) { c.debitRetries = true } }

// WithClock sets the clock leases are timed with (default time.Now), for
// tests. Only differences between its readings are used.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

func (c config) validate() error {
	switch {
	case c.lifetime < time.Millisecond || c.lifetime > time.Minute:
		return fmt.Errorf("lease: WithLifetime(%s): the lifetime must be between 1ms and 1m", c.lifetime)
	case c.hotN < 0:
		return fmt.Errorf("lease: WithHotThreshold(%d, %s): the number of decisions must be >= 0", c.hotN, c.hotInterval)
	case c.hotInterval < time.Millisecond || c.hotInterval > time.Minute:
		return fmt.Errorf("lease: WithHotThreshold(%d, %s): the interval must be between 1ms and 1m", c.hotN, c.hotInterval)
	case c.hotN >= 1<<32:
		return fmt.Errorf("lease: WithHotThreshold(%d, %s): the number of decisions must be below 2^32", c.hotN, c.hotInterval)
	case !(c.maxShare > 0 && c.maxShare <= 0.5):
		return fmt.Errorf("lease: WithMaxShare(%g): the share must be > 0 and <= 0.5", c.maxShare)
	case c.maxLeases < 1:
		return fmt.Errorf("lease: WithMaxLeases(%d): at least one lease", c.maxLeases)
	case c.clock == nil:
		return fmt.Errorf("lease: WithClock(nil): give a clock")
	}
	return nil
}
