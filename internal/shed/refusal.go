package shed

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/overload"
)

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
	reasons
)

var reasonNames = [reasons]string{"queue full", "evicted", "queue timeout"}

func (r Reason) String() string {
	if r < reasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Refusal is the error of a call the Limiter shed: an overload.Refusal
// (errors.As, errors.Is overload.ErrShed) and why.
type Refusal struct {
	overload.Refusal
	Reason Reason
	// OverShare reports that the call's tenant was past its fair share.
	OverShare bool
}

// Error says what was shed, why, and when to come back. It is built by
// concatenation, not fmt: every shed call's status carries it, on the path
// that must stay cheapest under overload.
func (r *Refusal) Error() string {
	return "overload: " + r.Criticality.String() + " call shed (" + r.Reason.String() + "); retry after " + r.RetryAfter.Round(time.Millisecond).String()
}

// Unwrap returns the overload.Refusal.
func (r *Refusal) Unwrap() error { return &r.Refusal }
