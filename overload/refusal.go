package overload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrShed is what every Refusal is (errors.Is): the server shed the call
// to protect itself; the caller may retry after Refusal.RetryAfter.
var ErrShed = errors.New("overload: call shed")

// Reason says why a call was shed.
type Reason uint8

const (
	// QueueFull: every seat taken and the waiting room full of calls that
	// go before this one.
	QueueFull Reason = iota
	// Evicted: the call was waiting and a call that goes before it took
	// its place in a full room.
	Evicted
	// QueueTimeout: the call waited MaxWait (Target under a standing
	// queue) without a seat.
	QueueTimeout
)

func (r Reason) String() string {
	switch r {
	case QueueFull:
		return "queue full"
	case Evicted:
		return "evicted"
	case QueueTimeout:
		return "queue timeout"
	case Throttled:
		return "throttled by the client"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Refusal is the error of a shed call.
type Refusal struct {
	Reason      Reason
	Criticality Criticality
	// RetryAfter is a suggested wait before retrying, jittered so that the
	// calls shed together do not come back together.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("overload: %s call shed (%s); retry after %s", r.Criticality, r.Reason, r.RetryAfter)
}

// Is makes errors.Is(err, ErrShed) true.
func (r *Refusal) Is(target error) bool { return target == ErrShed }

// retryAfter is base × (Levels − c), times a uniform factor in [0.5, 1.5).
func retryAfter(base time.Duration, c Criticality) time.Duration {
	d := float64(base) * float64(Levels-int(min(c, CriticalPlus)))
	return time.Duration(d * (0.5 + rand.Float64()))
}
