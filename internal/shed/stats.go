package shed

import "time"

// Stats is a snapshot of a Limiter for metrics and logs.
type Stats struct {
	// Limit is the concurrency limit (1 during a probe).
	Limit float64
	// InFlight and Queued are the calls holding a seat and waiting.
	InFlight, Queued int
	// QueueCap is how many calls may wait now.
	QueueCap int
	// Standing reports a standing queue: newest first, Target waits.
	Standing bool
	// Probing reports a probe of the latency alone in progress.
	Probing bool
	// Alone is the latency of a call that runs alone (0: not measured).
	Alone time.Duration
	// Throughput is the calls finished per second, smoothed.
	Throughput float64
	// Admitted counts the calls given a seat, by criticality.
	Admitted [Levels]uint64
	// Shed counts the calls refused, by criticality and whether their
	// tenant was above its share.
	Shed [Levels]ShedCount
	// ShedBy counts the calls refused by Reason, and ShedByCheck those
	// refused by Check, before the door spent anything on them.
	ShedBy      [reasons]uint64
	ShedByCheck uint64
}

// ShedCount counts shed calls by tenant: within its fair share or above.
type ShedCount struct {
	WithinShare, OverShare uint64
}
