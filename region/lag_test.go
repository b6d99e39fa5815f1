package region

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// How much of the limit the regions use, and of its fair share each gets,
// depends on their goroutines running on time: a share arrives late when
// the process that reports, computes or applies it waits for a CPU, and a
// lease not renewed in time falls back to the floor share, safe and
// small. The tests' floors (90–95% of the limit and of a fair share) hold on a
// machine that keeps time; on one that does not (a CPU hog beside the
// race detector and every other package's tests, 24 processes' goroutines
// in one binary) they are logged, and only what is never loosened is
// checked: the shares in force never add up to more than the limit, no
// span admits more than B + R·τ + N·k, and every region that asks is
// admitted something. The benchmarks measure the figures (docs/multi-region.md).

// lagProbe measures how late this process's goroutines run: every 5 ms a
// goroutine notes how much later than asked its sleep ended.
type lagProbe struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	late   []time.Duration
	logged bool
}

// busyLag is the 90th percentile of a probe's lateness above which the
// machine did not keep time: on an idle one a 5 ms sleep ends within a
// few hundred µs of when it was asked to.
const busyLag = 2 * time.Millisecond

func startLagProbe(t *testing.T) *lagProbe {
	p := &lagProbe{stop: make(chan struct{})}
	p.wg.Go(func() {
		for {
			at := time.Now()
			select {
			case <-p.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			p.late = append(p.late, time.Since(at)-5*time.Millisecond)
		}
	})
	t.Cleanup(p.halt)
	return p
}

func (p *lagProbe) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// floor is strict when the machine kept time during the probe, and a
// trace above 0 when it did not (which it logs, once).
func (p *lagProbe) floor(t *testing.T, strict float64) float64 {
	t.Helper()
	p.halt()
	if len(p.late) == 0 {
		return strict
	}
	s := slices.Clone(p.late)
	slices.Sort(s)
	p90 := s[len(s)*9/10]
	if p90 <= busyLag {
		return strict
	}
	if !p.logged {
		p.logged = true
		t.Logf("the machine ran goroutines %s late (p90 of a 5 ms sleep, above %s): the design's floors do not apply; the shares and the envelope are checked", p90.Round(10*time.Microsecond), busyLag)
	}
	return 1e-9
}
