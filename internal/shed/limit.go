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
//
// A server's calls are not alike: one method answers in a millisecond,
// another waits ten on a database. Compared with the fastest call's
// latency alone, a mix of the two would read as a server ten times slower
// than it can be, and the limit would fall to one call while nothing was
// short. So each class of call (Call.Class: its method) has its own
// latency alone, and the interval's statistic is the mean, over the calls
// that finished, of each call's latency ÷ its class's latency alone: the
// gradient is Tolerance ÷ that mean. With one class it is mean ÷ alone, as
// above. A class not measured alone yet counts for nothing until it is (a
// probe measures whichever calls come through); one not measured alone
// for classWindows windows forgets its value, and past maxClasses classes
// the others share one.
type gradient struct {
	o     *Options
	limit float64

	// the interval being measured
	start       time.Time
	n           int     // calls finished
	ratios      float64 // the sum of latency ÷ latency alone of its class, over nr calls
	nr          int     // calls finished whose class has a latency alone
	maxInflight int
	throughput  float64 // calls/s finished, smoothed; 0 before the first interval

	// latency alone, per class
	classes   map[string]*class
	other     class         // the classes past maxClasses
	alone     time.Duration // the shortest of the classes' (Stats); 0: none measured
	winStart  time.Time
	winAny    bool // some call ran alone since winStart
	stale     bool // no call ran alone in the last window
	probing   bool
	probeLeft int
}

// class is the latency alone of one class of call.
type class struct {
	alone  time.Duration // 0: not measured, or forgotten
	winMin time.Duration // minimum of its calls alone since winStart; 0: none
	idle   int           // windows in a row without a call alone
}

const (
	// maxClasses bounds the classes measured apart; past it the others
	// share one. A server's methods and routes are bounded by what it
	// registers; the cap bounds memory whatever names a door is given.
	maxClasses = 256
	// classWindows is how many windows in a row a class may go without a
	// call alone before its latency alone is forgotten: a value measured
	// long ago may no longer be what a call of the class costs.
	classWindows = 6
)

func newGradient(o *Options, now time.Time) gradient {
	return gradient{o: o, limit: float64(o.InitialLimit), start: now, winStart: now, stale: true, classes: map[string]*class{}}
}

// classOf returns the class named name, made if need be.
func (g *gradient) classOf(name string) *class {
	if c, ok := g.classes[name]; ok {
		return c
	}
	if len(g.classes) >= maxClasses {
		return &g.other
	}
	c := &class{}
	g.classes[name] = c
	return c
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

// finished records the latency of a call of class c, ran alone or not,
// and moves the limit when an interval is complete; inflight no longer
// counts the call.
func (g *gradient) finished(now time.Time, latency time.Duration, alone bool, inflight int, c *class) {
	g.n++
	if alone {
		if c.winMin == 0 || latency < c.winMin {
			c.winMin = latency
		}
		if c.alone == 0 || latency < c.alone {
			c.alone = latency
		}
		if g.alone == 0 || latency < g.alone {
			g.alone = latency
		}
		g.winAny = true
		if g.probing {
			if g.probeLeft--; g.probeLeft <= 0 {
				g.probing = false
				g.rotate(now)
			}
		}
	}
	if c.alone > 0 {
		g.nr++
		g.ratios += float64(latency) / float64(c.alone)
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
	if g.nr > 0 && !g.probing {
		grad := g.o.Tolerance / math.Max(g.ratios/float64(g.nr), 1e-9)
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
	g.start, g.n, g.nr, g.ratios, g.maxInflight = now, 0, 0, 0, inflight
}

// window is how long a latency alone is trusted.
func (g *gradient) window() time.Duration {
	if g.o.ProbeInterval > 0 {
		return g.o.ProbeInterval
	}
	return 10 * time.Second
}

// rotate starts a new window of latency alone: each class's minimum in
// the last one, if a call of it ran alone, becomes its latency alone; a
// class without one for classWindows windows forgets it.
func (g *gradient) rotate(now time.Time) {
	g.stale = !g.winAny
	g.alone = 0
	roll := func(c *class) bool {
		if c.winMin > 0 {
			c.alone, c.idle = c.winMin, 0
		} else if c.idle++; c.idle >= classWindows {
			c.alone = 0
		}
		c.winMin = 0
		if c.alone > 0 && (g.alone == 0 || c.alone < g.alone) {
			g.alone = c.alone
		}
		return c.alone > 0 || c.idle < classWindows
	}
	for name, c := range g.classes {
		if !roll(c) {
			delete(g.classes, name) // idle for classWindows windows; a call still holding it updates it unseen
		}
	}
	roll(&g.other)
	g.winStart, g.winAny = now, false
}
