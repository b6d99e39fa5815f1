package main

import (
	"context"
	"runtime"
	"time"
)

// work is the handler's CPU: steps of a fixed amount of computation with a
// yield between them, so that calls in flight share the core (and each one
// slows down as more run) and a call whose caller gave up stops at the
// next step, as a handler checking its context would.
type work struct {
	steps, spin int
}

var sink uint64

func spin(n int) {
	x := sink | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink = x
}

func (w work) call(ctx context.Context, _ string) error {
	for range w.steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		spin(w.spin)
		runtime.Gosched()
	}
	return nil
}

// calibrateSpin returns the iterations of spin that take d on this CPU.
func calibrateSpin(d time.Duration) int {
	n := 1 << 14
	for {
		start := time.Now()
		spin(n)
		if el := time.Since(start); el > 20*time.Millisecond {
			best := el
			for range 5 { // the fastest of a few: the machine is shared
				start = time.Now()
				spin(n)
				best = min(best, time.Since(start))
			}
			return int(float64(n) * float64(d) / float64(best))
		}
		n *= 2
	}
}
