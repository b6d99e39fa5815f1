package rls

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults of the quota service (see QuotaOptions).
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

// QuotaOptions configures a QuotaServer. The zero value is every default:
// Envoy's 5s report interval until a bucket's reports say theirs,
// assignments that live 3 report intervals, a rebalance every second, and
// time.Now.
type QuotaOptions struct {
	// ReportInterval is the report interval assumed for a bucket until its
	// reports say theirs (time_elapsed); 0 means 5s, Envoy's. At least 1s.
	ReportInterval time.Duration
	// AssignmentReports is how many report intervals an assignment lives
	// without another report (rounded up to whole seconds, as Envoy reads
	// it); 0 means 3. A data plane that stops reporting keeps its share in
	// the store as long.
	AssignmentReports int
	// RebalanceInterval is how often each stream's assignments are
	// computed again between reports, so that a data plane's share follows
	// the others' reports without waiting for its own; 0 means 1s, and a
	// negative RebalanceInterval turns it off (assignments are computed
	// at reports only).
	RebalanceInterval time.Duration
	// Clock is the clock the quota service tells a silent bucket by (nil:
	// time.Now), as engine.Config.Clock is a Limiter's. Shares expire by
	// the store's clock.
	Clock func() time.Time
}

type quotaOptions struct {
	reportInterval time.Duration
	reports        int
	rebalance      time.Duration // 0: off
	clock          func() time.Time
	// idleFills is how many fills of the limit the data planes whose
	// last report refused nothing hold as burst between them (split
	// evenly among a bucket's data planes); 0 none.
	idleFills float64
	// newTicker returns the rebalance ticks of one stream and how to stop
	// them; tests replace it.
	newTicker func(time.Duration) (<-chan time.Time, func())
}

// resolve checks o and gives every zero field its default.
func (o QuotaOptions) resolve() (quotaOptions, error) {
	switch {
	case o.ReportInterval != 0 && o.ReportInterval < time.Second:
		return quotaOptions{}, fmt.Errorf("rls: report interval %s: want at least 1s (0: the default, 5s)", o.ReportInterval)
	case o.AssignmentReports < 0:
		return quotaOptions{}, fmt.Errorf("rls: assignment reports %d: want at least 1 (0: the default, 3)", o.AssignmentReports)
	}
	r := quotaOptions{
		reportInterval: cmp.Or(o.ReportInterval, defaultReportInterval),
		reports:        cmp.Or(o.AssignmentReports, defaultAssignmentReports),
		rebalance:      max(0, cmp.Or(o.RebalanceInterval, defaultRebalanceInterval)),
		clock:          o.Clock,
		idleFills:      1,
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	return r, nil
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
