package rls

import (
	"testing"
	"time"
)

// TestQuotaOptionsResolve: every zero field of QuotaOptions means its
// default, a negative RebalanceInterval turns the rebalance off, and a
// field given is kept.
func TestQuotaOptionsResolve(t *testing.T) {
	o, err := QuotaOptions{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.reportInterval != 5*time.Second || o.reports != 3 || o.rebalance != time.Second || o.clock == nil || o.idleFills != 1 {
		t.Errorf("zero value: interval %s, reports %d, rebalance %s, clock %v, idle fills %v; want 5s, 3, 1s, time.Now, 1",
			o.reportInterval, o.reports, o.rebalance, o.clock != nil, o.idleFills)
	}
	at := time.Unix(1e9, 0)
	o, err = QuotaOptions{ReportInterval: 2 * time.Second, AssignmentReports: 4, RebalanceInterval: -1, Clock: func() time.Time { return at }}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.reportInterval != 2*time.Second || o.reports != 4 || o.rebalance != 0 || !o.clock().Equal(at) {
		t.Errorf("given: interval %s, reports %d, rebalance %s, clock %s; want 2s, 4, 0 (off), %s", o.reportInterval, o.reports, o.rebalance, o.clock(), at)
	}
}
