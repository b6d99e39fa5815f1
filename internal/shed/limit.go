package shed

import (
	"math"
	"time"
)

// gradient is the adaptive concurrency limit, a latency gradient in the
// family of Envoy's adaptive concurrency filter and Netflix's Gradient:
// every Interval the limit is multiplied by Tolerance × alone / mean,
// where mean is the mean latency of the calls that finished in the
// interval and alone the latency of a call that ran with no other. On a
// server whose handlers share a CPU, mean grows with the calls in flight,
// so the limit settles where Tolerance × alone = mean: Tolerance times the
// concurrency the server needs to stay busy, and no more. On a server
// whose handlers wait on something else, mean stays flat until that
// resource saturates, and the limit grows (never faster than 2× an
// interval, and only while the calls in flight use half of it) until it
// does. docs/overload.md says why this and not Vegas.
//
// The latency alone is the minimum over ProbeInterval of the calls that
// ran alone (admitted into an empty server, finished before any other was
// admitted). Under sustained overload no call runs alone, so a stale value
// is refreshed by a probe: the limit drops to one call until ProbeSamples
// calls have run alone (Envoy's minRTT window, BBR's ProbeRTT). A value
// measured at a higher concurrency would ratchet the limit up; only calls
// alone count.
type gradient struct {
	o     *Options
	limit float64

	// the interval being measured
	start       time.Time
	n           int
	sum         time.Duration
	maxInflight int
	throughput  float64 // calls/s finished, smoothed; 0 before the first interval

	// latency alone
	alone     time.Duration // 0: not measured yet
	winStart  time.Time
	winMin    time.Duration // minimum of the calls alone since winStart; 0: none
	stale     bool          // no call ran alone in the last window
	probing   bool
	probeLeft int
}

func newGradient(o *Options, now time.Time) gradient {
	return gradient{o: o, limit: float64(o.InitialLimit), start: now, winStart: now, stale: true}
}

// admits reports whether one more call may run with inflight running: the
// limit's whole part, at least one.
func (g *gradient) admits(inflight int) bool {
	if g.probing {
		return inflight < 1
	}
	return inflight < max(1, int(g.limit))
}

// granted notes a call admitted; inflight includes it.
func (g *gradient) granted(inflight int) {
	g.maxInflight = max(g.maxInflight, inflight)
}

// binding notes that a call had to wait: a stale latency-alone is
// refreshed by a probe now.
func (g *gradient) binding() {
	if g.stale && !g.probing && g.o.ProbeInterval > 0 {
		g.probing, g.probeLeft = true, g.o.ProbeSamples
	}
}

// finished records a call's latency, ran alone or not, and moves the limit
// when an interval is complete; inflight no longer counts the call.
func (g *gradient) finished(now time.Time, latency time.Duration, alone bool, inflight int) {
	g.n++
	g.sum += latency
	if alone {
		if g.winMin == 0 || latency < g.winMin {
			g.winMin = latency
		}
		if g.alone == 0 || latency < g.alone {
			g.alone = latency
		}
		if g.probing {
			if g.probeLeft--; g.probeLeft <= 0 {
				g.probing = false
				g.rotate(now)
			}
		}
	}
	elapsed := now.Sub(g.start)
	if elapsed < g.o.Interval || (g.n < 5 && elapsed < 10*g.o.Interval) {
		return
	}
	rate := float64(g.n) / elapsed.Seconds()
	if g.throughput == 0 {
		g.throughput = rate
	} else {
		g.throughput += (rate - g.throughput) / 2
	}
	if g.alone > 0 && !g.probing {
		mean := g.sum / time.Duration(g.n)
		grad := g.o.Tolerance * float64(g.alone) / float64(max(mean, 1))
		grad = math.Max(0.5, math.Min(2, grad))
		if grad > 1 && 2*g.maxInflight < int(g.limit) {
			grad = 1 // not using the limit: no evidence it should grow
		}
		g.limit += (g.limit*grad - g.limit) / 2
		g.limit = math.Max(float64(g.o.MinLimit), math.Min(float64(g.o.MaxLimit), g.limit))
	}
	if now.Sub(g.winStart) >= g.window() {
		g.rotate(now)
	}
	g.start, g.n, g.sum, g.maxInflight = now, 0, 0, inflight
}

// window is how long a latency alone is trusted.
func (g *gradient) window() time.Duration {
	if g.o.ProbeInterval > 0 {
		return g.o.ProbeInterval
	}
	return 10 * time.Second
}

// rotate starts a new window of latency alone: the last one's minimum, if
// any call ran alone in it, becomes the latency alone.
func (g *gradient) rotate(now time.Time) {
	g.stale = g.winMin == 0
	if !g.stale {
		g.alone = g.winMin
	}
	g.winStart, g.winMin = now, 0
}
