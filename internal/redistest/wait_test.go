package redistest

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// failures records what a helper fails its test with, instead of failing.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}

func (f *failures) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// Eventually returns as soon as its condition holds, after polls that
// start at a millisecond apart, and returns when it held.
func TestEventuallyReturnsWhenItHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		at := Eventually(t, time.Minute, func() error {
			if calls++; calls < 4 {
				return errors.New("not yet")
			}
			return nil
		})
		// Polls at 0, 1ms, 3ms and 7ms.
		if got := at.Sub(start); got != 7*time.Millisecond || calls != 4 {
			t.Fatalf("held at the 4th poll %s after the start (%d polls), want 7ms", got, calls)
		}
	})
}

// Eventually fails its test with the condition's last error once the
// timeout has passed, polling no more than every 20ms meanwhile.
func TestEventuallyFailsWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failures{TB: t}
		start := time.Now()
		calls := 0
		Eventually(f, time.Second, func() error { calls++; return fmt.Errorf("poll %d", calls) })
		if len(f.msgs) != 1 || f.msgs[0] != fmt.Sprintf("redistest: not so within 1s: poll %d", calls) {
			t.Fatalf("failed with %q after %d polls, want one failure naming the last poll's error", f.msgs, calls)
		}
		if took := time.Since(start); took != time.Second {
			t.Errorf("gave up after %s, want the timeout, 1s", took)
		}
		if calls < 1000/20 || calls > 1000/20+6 {
			t.Errorf("%d polls in 1s, want about one every 20ms once the interval has grown", calls)
		}
	})
}

// A condition that holds only at the deadline is seen to hold: the last
// look is as the timeout ends.
func TestEventuallyLooksAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(100 * time.Millisecond)
		at := Eventually(t, 100*time.Millisecond, func() error {
			if time.Now().Before(deadline) {
				return errors.New("not yet")
			}
			return nil
		})
		if !at.Equal(deadline) {
			t.Fatalf("held at %s, want at the deadline %s", at, deadline)
		}
	})
}

// Await reports whether its condition held within the timeout.
func TestAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if Await(time.Minute, func() bool { return false }) {
			t.Fatal("Await of a condition that never holds returned true")
		}
		if took := time.Since(start); took != time.Minute {
			t.Errorf("gave up after %s, want the timeout, 1m", took)
		}
		ready := time.Now().Add(50 * time.Millisecond)
		if !Await(time.Second, func() bool { return !time.Now().Before(ready) }) {
			t.Fatal("Await of a condition that holds after 50ms of 1s returned false")
		}
		if late := time.Since(ready); late > 20*time.Millisecond {
			t.Errorf("saw the condition %s after it held, want within one poll (20ms)", late)
		}
	})
}

// Elapse lets exactly the time asked pass, and none for a duration that is
// not positive.
func TestElapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		Elapse(-time.Second)
		Elapse(0)
		if d := time.Since(start); d != 0 {
			t.Fatalf("Elapse of no time let %s pass", d)
		}
		Elapse(600 * time.Millisecond)
		if d := time.Since(start); d != 600*time.Millisecond {
			t.Fatalf("Elapse(600ms) let %s pass", d)
		}
	})
}

//go:noinline
func parkedForWaitTest(parked chan<- struct{}, release <-chan struct{}) {
	close(parked)
	<-release
}

// AwaitGoroutinesGone waits for the goroutines running a function to end,
// and says when they do not.
func TestAwaitGoroutinesGone(t *testing.T) {
	parked, release, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		parkedForWaitTest(parked, release)
	}()
	<-parked
	const frame = "redistest.parkedForWaitTest"
	if AwaitGoroutinesGone(50*time.Millisecond, frame) {
		t.Fatal("reported gone a goroutine that still runs the function")
	}
	close(release)
	if !AwaitGoroutinesGone(5*time.Second, frame) {
		t.Fatal("the goroutine ended but is not reported gone")
	}
	<-ended
}
