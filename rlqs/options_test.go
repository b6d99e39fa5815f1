package rlqs

import (
	"testing"
	"time"
)

// TestOptionsResolve: every zero field of Options means its default, a
// negative FirstAssignmentWait is no wait, and a field given is kept.
func TestOptionsResolve(t *testing.T) {
	o, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.interval != time.Second || o.firstWait != 50*time.Millisecond || o.idle != 30 || o.maxBucket != 1024 || o.bucketID == nil || o.clock == nil {
		t.Errorf("zero value: %+v, want 1s, 50ms, 30, 1024, RuleBucketID, time.Now", o)
	}
	at := time.Unix(1e9, 0)
	id := func(string) map[string]string { return map[string]string{"b": "1"} }
	o, err = Options{ReportInterval: 10 * time.Millisecond, FirstAssignmentWait: -1, IdleReports: 2, MaxBuckets: 3, BucketID: id, Clock: func() time.Time { return at }}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.interval != 10*time.Millisecond || o.firstWait != 0 || o.idle != 2 || o.maxBucket != 3 || o.bucketID("k")["b"] != "1" || !o.clock().Equal(at) {
		t.Errorf("given: %+v, want 10ms, 0 (no wait), 2, 3, the function given, the clock given", o)
	}
}
