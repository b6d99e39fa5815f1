package overload

import (
	"time"

	"github.com/tollgate/tollgate/keyfunc"
)

// Options configure a server's overload control (engine.Config.Overload).
// The zero value is the default of every field; a negative value is an
// error, except where a field says so.
type Options struct {
	// Tenant names whom a call is for: calls of one tenant share one fair
	// share under overload. nil means one tenant; an error or a missing
	// value counts as the tenant "".
	Tenant keyfunc.Func
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
