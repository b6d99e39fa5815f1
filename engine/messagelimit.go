package engine

import (
	"errors"
	"time"

	"github.com/tollgate/tollgate"
)

// defaultMaxShapeWait is the longest a Shape limit holds one message back
// when its MaxWait is 0.
const defaultMaxShapeWait = 5 * time.Second

// MessageLimit is a rule's limit on the messages a client sends on a
// stream (each received message costs 1, judged once it has arrived), in a
// bucket per key apart from the one the stream's opening pays into. Unary
// calls ignore it. The zero value is no limit.
type MessageLimit struct {
	// Limit is the limit on each message; the zero Limit is no limit.
	Limit tollgate.Limit
	// Shape holds back a message the limit refuses: the receive waits for
	// the decision's RetryAfter within the stream's context and asks
	// again, for at most MaxWait in total, so that the client is slowed
	// down by flow control instead of failing. Without Shape (or past
	// MaxWait) the receive fails with the denial a refused call gets, and
	// the handler normally ends the stream with it.
	Shape bool
	// MaxWait bounds Shape's waits for one message; 0 means 5s. It must be
	// 0 without Shape.
	MaxWait time.Duration
}

// on reports whether m limits messages.
func (m MessageLimit) on() bool { return m != MessageLimit{} }

// maxWait returns how long, in total, a refused message is held back, and
// false when refused messages fail at once (no Shape), or an error for a
// MaxWait out of range.
func (m MessageLimit) maxWait() (time.Duration, bool, error) {
	switch {
	case m.MaxWait < 0:
		return 0, false, errors.New("PerMessage.MaxWait must be >= 0")
	case !m.Shape && m.MaxWait != 0:
		return 0, false, errors.New("PerMessage.MaxWait is set without Shape: a message is only held back when Shape is set")
	case !m.Shape:
		return 0, false, nil
	case m.MaxWait == 0:
		return defaultMaxShapeWait, true, nil
	}
	return m.MaxWait, true, nil
}
