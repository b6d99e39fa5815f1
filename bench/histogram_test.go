package bench

import (
	"testing"
	"time"
)

func TestHistogramQuantilesWithinBucketPrecision(t *testing.T) {
	var h Histogram
	// 1µs .. 1000µs, one each: the p50 is 500µs and the p99 990µs.
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if diff := got - c.want; diff < -c.want/16 || diff > c.want/16 {
			t.Errorf("Quantile(%v) = %s, want %s within 1/16", c.q, got, c.want)
		}
	}
	if h.Count() != 1000 {
		t.Errorf("Count() = %d, want 1000", h.Count())
	}
	var merged Histogram
	merged.Merge(&h)
	merged.Merge(&h)
	if merged.Count() != 2000 || merged.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merged twice: count %d p50 %s, want 2000 and %s", merged.Count(), merged.Quantile(0.5), h.Quantile(0.5))
	}
}

func TestHistogramBucketsAreContiguous(t *testing.T) {
	for ns := int64(0); ns < 1<<20; ns++ {
		i := bucketOf(ns)
		if ns < bucketFloor(i) || ns >= bucketFloor(i+1) {
			t.Fatalf("%dns in bucket %d = [%d, %d)", ns, i, bucketFloor(i), bucketFloor(i+1))
		}
	}
}
