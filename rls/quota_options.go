package rls

import (
	"time"
)

// Defaults of the quota service (see QuotaOption).
const (
	// defaultReportInterval is the report interval assumed for a bucket
	// whose reports have not said theirs yet: Envoy's rate_limit_quota
	// filter reports every 5 seconds.
	defaultReportInterval = 5 * time.Second
	// defaultAssignmentReports is how many report intervals an
	// assignment lives, and a data plane keeps its share, without
	// another report.
	defaultAssignmentReports = 3
	// defaultRebalanceInterval is how often each stream's assignments are
	// computed again from the demands last reported, between reports.
	defaultRebalanceInterval = time.Second
)

// Bounds of the quota service's input. A report beyond them ends its
// stream with codes.InvalidArgument before anything is stored.
const (
	// maxQuotaBuckets is the most buckets one stream reports.
	maxQuotaBuckets = 1024
	// maxTimeElapsed is the longest time_elapsed a report may carry.
	maxTimeElapsed = 24 * time.Hour
)

// QuotaOption configures a QuotaServer.
type QuotaOption func(*quotaOptions)

type quotaOptions struct {
	reportInterval time.Duration
	reports        int
	rebalance      time.Duration
	clock          func() time.Time
	// idleFills is how many fills of the limit the data planes whose
	// last report refused nothing hold as burst between them (split
	// evenly among a bucket's data planes); 0 none.
	idleFills float64
	// newTicker returns the rebalance ticks of one stream and how to stop
	// them; tests replace it.
	newTicker func(time.Duration) (<-chan time.Time, func())
}

func defaultQuotaOptions() quotaOptions {
	return quotaOptions{
		reportInterval: defaultReportInterval,
		reports:        defaultAssignmentReports,
		rebalance:      defaultRebalanceInterval,
		clock:          time.Now,
		idleFills:      1,
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
}

// WithReportInterval sets the report interval assumed for a bucket until
// its reports say theirs (time_elapsed); the default is
// 5s, Envoy's.
func WithReportInterval(d time.Duration) QuotaOption {
	return func(o *quotaOptions) { o.reportInterval = d }
}

// WithAssignmentReports sets how many report intervals an assignment
// lives without another report (rounded up to whole seconds, as Envoy
// reads it); the default is 3. A data plane that
// stops reporting keeps its share in the store as long.
func WithAssignmentReports(n int) QuotaOption {
	return func(o *quotaOptions) { o.reports = n }
}

// WithRebalanceInterval sets how often each stream's assignments are
// computed again between reports, so that a data plane's share follows
// the others' reports without waiting for its own; 0 turns it off. The
// default is 1s.
func WithRebalanceInterval(d time.Duration) QuotaOption {
	return func(o *quotaOptions) { o.rebalance = d }
}

// WithClock sets the clock the quota service tells a silent bucket by
// (default time.Now), as interceptor.WithClock does for a Limiter. Shares
// expire by the store's clock.
func WithClock(now func() time.Time) QuotaOption {
	return func(o *quotaOptions) { o.clock = now }
}

// idleBurst is the burst beyond its share that a data plane whose last
// report refused nothing holds, on a limit of rate per period shared by
// members.
func (o *quotaOptions) idleBurst(rate int64, members int) int64 {
	if o.idleFills <= 0 || members < 1 {
		return 0
	}
	return int64(o.idleFills * float64(rate) / float64(members))
}
