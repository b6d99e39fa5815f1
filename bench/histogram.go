package bench

import (
	"math/bits"
	"time"
)

// histSub is the number of sub-buckets per power of two: latencies are
// kept to within 1/16 (about 6%) of their value, in constant memory, so a
// measurement can record millions of decisions without allocating.
const histSub = 16

// Histogram counts latencies in log-linear buckets. The zero value is
// ready; it is not safe for concurrent use: give each goroutine its own
// and Merge them.
type Histogram struct {
	counts [64 * histSub]int64
	n      int64
}

func bucketOf(ns int64) int {
	if ns < histSub {
		return int(max(ns, 0))
	}
	exp := bits.Len64(uint64(ns)) - 5 // ns >> exp is in [16, 32)
	return (exp+1)*histSub + int(ns>>exp) - histSub
}

// bucketFloor returns the smallest latency in bucket i, in nanoseconds.
func bucketFloor(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	exp := i/histSub - 1
	return int64(i%histSub+histSub) << exp
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Count is the number of latencies recorded.
func (h *Histogram) Count() int64 { return h.n }

// Quantile returns the latency below which a fraction q (0 < q ≤ 1) of
// the recorded ones fall, to the precision of its bucket (the bucket's
// midpoint), or 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketFloor(i), bucketFloor(i+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
}
