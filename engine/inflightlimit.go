package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// InFlight bounds the calls of one identity running at once across every
// replica sharing the store (a stream counts from its opening to its end).
// A call finding none of its seats free is refused as Denied; one refused by the rule's rate limits takes no
// seat, and one refused for lack of a seat debits no rate. The store must
// be a tollgate.SeatStore. The zero value is no bound.
type InFlight struct {
	// Max is how many calls of one identity may run at once; 0 means no
	// bound, and then the other fields must be 0.
	Max int64
	// SeatTimeout is how long a seat lives when its call has no deadline (a
	// unary call with one holds it until its deadline and a second more),
	// renewed every third of it while the call runs, so that a replica that
	// dies frees its seats by then. 0 means the Limiter's (Config.SeatTimeout).
	SeatTimeout time.Duration
	// StreamWait is how long a stream's opening that finds no free seat
	// waits for one, within the stream's context, asking again after each
	// suggested wait. 0 refuses it at once, as a unary call is.
	StreamWait time.Duration
}

// newInFlight compiles a rule's in-flight limit; nil without one.
func newInFlight(f InFlight, defaultTTL time.Duration, replicas int64) (*inFlight, error) {
	switch {
	case f.Max < 0:
		return nil, fmt.Errorf("InFlight.Max must be >= 0, got %d", f.Max)
	case f.Max > tollgate.MaxRate:
		return nil, fmt.Errorf("InFlight.Max must be at most MaxRate (10^12), got %d", f.Max)
	case f.SeatTimeout < 0:
		return nil, fmt.Errorf("InFlight.SeatTimeout must be >= 0, got %s", f.SeatTimeout)
	case f.StreamWait < 0:
		return nil, fmt.Errorf("InFlight.StreamWait must be >= 0, got %s", f.StreamWait)
	case f.Max == 0 && (f.SeatTimeout != 0 || f.StreamWait != 0):
		return nil, errors.New("InFlight has a SeatTimeout or a StreamWait but no Max: set Max, the calls of one identity that may run at once")
	case f.Max == 0:
		return nil, nil
	}
	ttl := f.SeatTimeout
	if ttl == 0 {
		ttl = defaultTTL
	}
	if ttl < time.Millisecond {
		return nil, errors.New("InFlight.SeatTimeout is below 1ms: a seat of a call without a deadline would expire at once")
	}
	return &inFlight{
		max: f.Max, localMax: ceilDiv(f.Max, replicas), ttl: ttl, streamWait: f.StreamWait,
	}, nil
}
