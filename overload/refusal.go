package overload

import (
	"errors"
	"fmt"
	"time"
)

// ErrShed is what every refusal for overload is (errors.Is): the server,
// or the client's Throttle, shed the call to protect the server; the
// caller may retry after the Refusal's RetryAfter.
var ErrShed = errors.New("overload: call shed")

// Refusal is the error of a call shed for overload (errors.As): a
// Throttle's, or, wrapped by the engine's refusal, a server's.
type Refusal struct {
	Criticality Criticality
	// RetryAfter is a suggested wait before retrying, jittered so that the
	// calls shed together do not come back together.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("overload: %s call shed; retry after %s", r.Criticality, r.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrShed) true.
func (r *Refusal) Is(target error) bool { return target == ErrShed }
