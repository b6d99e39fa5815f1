package engine

import (
	"time"

	"github.com/tollgate/tollgate"
)

// DefaultMaxShapeWait is the longest Shape holds one message back when its
// maxWait is 0.
const DefaultMaxShapeWait = 5 * time.Second

// MessageLimit is a rule's limit on the messages a client sends on a
// stream (each RecvMsg costs 1, judged once the message has arrived), in a
// bucket per key apart from the one the stream's opening pays into, with
// what a message it refuses gets: Police or Shape. Unary calls ignore it.
// The zero value is no limit.
type MessageLimit struct {
	limit tollgate.Limit
	set   bool
	// shape: a refused message waits, for at most maxWait in total.
	shape   bool
	maxWait time.Duration
}

// Police limits each message of a stream by limit, failing the receive of
// one it refuses: RecvMsg returns the same ResourceExhausted status a
// denied call gets, and the handler normally ends the stream with it.
func Police(limit tollgate.Limit) MessageLimit {
	return MessageLimit{limit: limit, set: true}
}

// Shape limits each message of a stream by limit, holding back one it
// refuses: RecvMsg waits for the decision's RetryAfter within the stream's
// context and asks again, for at most maxWait in total (0 means
// DefaultMaxShapeWait); past that it fails as Police does. The client is
// slowed down by flow control instead of failing.
func Shape(limit tollgate.Limit, maxWait time.Duration) MessageLimit {
	return MessageLimit{limit: limit, set: true, shape: true, maxWait: maxWait}
}

// Limit returns the limit on each message, and false for the zero value.
func (m MessageLimit) Limit() (tollgate.Limit, bool) { return m.limit, m.set }

// MaxWait returns how long, in total, a refused message is held back
// (Shape's maxWait, or DefaultMaxShapeWait for 0), and false when refused
// messages fail at once (Police, or no limit).
func (m MessageLimit) MaxWait() (time.Duration, bool) {
	if !m.shape {
		return 0, false
	}
	if m.maxWait == 0 {
		return DefaultMaxShapeWait, true
	}
	return m.maxWait, true
}
