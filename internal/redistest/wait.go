package redistest

// Waiting on real things: tests that wait on a real server, a real process
// or a real load wait for what they expect to happen (Eventually, Await),
// never for a duration they hope is long enough. Only a window that is the
// scenario itself is a duration (Elapse). Time-driven code that waits on
// nothing real runs on an injected clock or in a testing/synctest bubble
// instead, and does not wait at all.

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Polling intervals: the first poll follows at once, then the interval
// doubles from minPoll up to maxPoll, so that a condition met at once costs
// a millisecond and one that takes seconds costs a few dozen checks.
const (
	minPoll = time.Millisecond
	maxPoll = 20 * time.Millisecond
)

// Eventually waits until cond returns nil and returns the instant it first
// did. It fails the test with cond's last error if that does not happen
// within timeout. cond runs on the calling goroutine, so it may fail the
// test itself.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	at, err := poll(ctx, cond)
	if err != nil {
		t.Fatalf("redistest: not so within %s: %v", timeout, err)
	}
	return at
}

// Await waits until cond returns true or timeout has passed, and reports
// whether it did. It is for a wait whose end is not in itself a failure:
// the test goes on to look at what happened (a load that was to use up its
// quotas, a journal that was to empty) and says what is wrong.
func Await(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := poll(ctx, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	return err == nil
}

var errNotYet = fmt.Errorf("not yet")

// Elapse lets d of real time pass (nothing when d ≤ 0). It is for a window
// that is the scenario itself and has nothing to wait for: a replica frozen
// 600ms before its primary is killed, a load run for 4s, a server's clock
// that must move past an expiry or a window's end. Anything else a test
// waits for, it waits for with Eventually or Await.
func Elapse(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// AwaitGoroutinesGone waits, for at most timeout, until no goroutine has
// frame (a function name, or part of one) on its stack, and reports
// whether none has: for goroutines a test left to end on their own (a
// command abandoned at its caller's deadline that returns at the client's
// read timeout, a go-redis dial probe), before goleak looks.
func AwaitGoroutinesGone(timeout time.Duration, frame string) bool {
	buf := make([]byte, 1<<20)
	return Await(timeout, func() bool {
		n := runtime.Stack(buf, true)
		return !bytes.Contains(buf[:n], []byte(frame))
	})
}

// poll calls cond until it returns nil, then returns that instant; when ctx
// ends first it returns cond's last error, from a last call as ctx ends:
// a condition that holds by the deadline is seen to hold.
func poll(ctx context.Context, cond func() error) (time.Time, error) {
	return pollEvery(ctx, maxPoll, cond)
}

// pollEvery is poll with the intervals growing to at most most, for a wait
// whose end is an instant a test measures by.
func pollEvery(ctx context.Context, most time.Duration, cond func() error) (time.Time, error) {
	for interval := min(minPoll, most); ; interval = min(2*interval, most) {
		err := cond()
		if err == nil {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			if err = cond(); err == nil {
				return time.Now(), nil
			}
			return time.Time{}, err
		case <-time.After(interval):
		}
	}
}
