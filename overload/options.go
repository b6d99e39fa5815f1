package overload

import (
	"fmt"
	"time"
)

// Options configure a Limiter. The zero value is the default of every
// field; a negative value is an error, except where a field says so.
type Options struct {
	// MinLimit and MaxLimit bound the concurrency limit (defaults 1 and
	// 1000); InitialLimit is where it starts (default 16).
	MinLimit, MaxLimit, InitialLimit int
	// Tolerance is how much slower than alone a handler may run before the
	// limit comes down: the limit settles where the handler's mean latency
	// is Tolerance times its latency alone (default 2, at least 1).
	Tolerance float64
	// Interval is how often the limit moves and how long the waiting room
	// must stay non-empty to count as a standing queue (default 100ms).
	Interval time.Duration
	// ProbeInterval is how long a measured latency-alone is trusted
	// (default 10s). When it is older and calls wait, the limit drops to
	// one call until ProbeSamples calls have run alone. Negative: never
	// probe; only calls that happen to run alone refresh it.
	ProbeInterval time.Duration
	// ProbeSamples is how many calls run alone make a probe (default 5).
	ProbeSamples int
	// MaxWait is the longest a call waits for a seat (default 100ms);
	// Target the longest under a standing queue (default 5ms, at most
	// MaxWait).
	MaxWait, Target time.Duration
	// MaxQueue caps the calls waiting (default 1000). Below it, the room
	// holds what the server drains within MaxWait (Target when standing).
	MaxQueue int
	// RetryAfter is the base of the wait a refusal suggests (default
	// 100ms): a Critical call is told 2× it, spread over ±50% so that
	// refused callers do not come back together; each level below waits
	// one base longer, each above one shorter.
	RetryAfter time.Duration
	// MaxTenants caps the tenants whose recent service is remembered for
	// fairness (default 10000); past it the least served are forgotten.
	MaxTenants int
}

func (o Options) withDefaults() (Options, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MinLimit", int64(o.MinLimit)}, {"MaxLimit", int64(o.MaxLimit)}, {"InitialLimit", int64(o.InitialLimit)},
		{"Interval", int64(o.Interval)}, {"ProbeSamples", int64(o.ProbeSamples)}, {"MaxWait", int64(o.MaxWait)},
		{"Target", int64(o.Target)}, {"MaxQueue", int64(o.MaxQueue)}, {"RetryAfter", int64(o.RetryAfter)},
		{"MaxTenants", int64(o.MaxTenants)},
	} {
		if f.v < 0 {
			return o, fmt.Errorf("overload: Options.%s is %d: want 0 (the default) or more", f.name, f.v)
		}
	}
	if o.Tolerance != 0 && !(o.Tolerance >= 1) {
		return o, fmt.Errorf("overload: Options.Tolerance is %v: want 0 (the default, 2) or at least 1", o.Tolerance)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MinLimit, 1)
	def(&o.MaxLimit, 1000)
	def(&o.InitialLimit, max(16, o.MinLimit))
	def(&o.ProbeSamples, 5)
	def(&o.MaxQueue, 1000)
	def(&o.MaxTenants, 10000)
	defD(&o.Interval, 100*time.Millisecond)
	defD(&o.ProbeInterval, 10*time.Second)
	defD(&o.MaxWait, 100*time.Millisecond)
	defD(&o.Target, min(5*time.Millisecond, o.MaxWait))
	defD(&o.RetryAfter, 100*time.Millisecond)
	if o.Tolerance == 0 {
		o.Tolerance = 2
	}
	switch {
	case o.MinLimit > o.MaxLimit:
		return o, fmt.Errorf("overload: Options.MinLimit %d is above MaxLimit %d", o.MinLimit, o.MaxLimit)
	case o.InitialLimit < o.MinLimit || o.InitialLimit > o.MaxLimit:
		return o, fmt.Errorf("overload: Options.InitialLimit %d is outside [MinLimit %d, MaxLimit %d]", o.InitialLimit, o.MinLimit, o.MaxLimit)
	case o.Target > o.MaxWait:
		return o, fmt.Errorf("overload: Options.Target %s is above MaxWait %s", o.Target, o.MaxWait)
	}
	return o, nil
}
