package overload

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ThrottleOptions configure a Throttle. The zero value is the default.
type ThrottleOptions struct {
	// K is how many calls a client may send per call accepted (default 2,
	// at least 1): it sends until its calls exceed K × the accepted ones.
	K float64
	// Window is how long calls are remembered (default 10s); it is kept
	// in 10 slices.
	Window time.Duration
	// RetryAfter is the base of the hint a throttled call gets (default
	// 100ms), as Options.RetryAfter.
	RetryAfter time.Duration
}

// Throttle is client-side adaptive throttling, per criticality (the
// Google SRE book, "Handling Overload"): a client that sees its calls of a
// criticality refused by the server refuses a share of them itself, with
// probability max(0, (calls − K × accepted) / (calls + 1)) over the
// Window. A refusal costs a server nearly as much as an answer (HTTP/2
// frames, header decoding, a response); refused at the client, the call
// costs the server nothing. Because the server sheds the least critical
// first, the client throttles them first too.
type Throttle struct {
	k     float64
	slice time.Duration
	retry time.Duration
	mu    sync.Mutex
	at    int64 // index of the current slice: now / slice
	calls [levels][10]float64
	acc   [levels][10]float64
}

// NewThrottle returns a Throttle, or an error naming the first bad option.
func NewThrottle(o ThrottleOptions) (*Throttle, error) {
	switch {
	case o.K != 0 && !(o.K >= 1):
		return nil, fmt.Errorf("overload: ThrottleOptions.K is %v: want 0 (the default, 2) or at least 1", o.K)
	case o.Window < 0:
		return nil, fmt.Errorf("overload: ThrottleOptions.Window is %s: want 0 (the default, 10s) or more", o.Window)
	case o.RetryAfter < 0:
		return nil, fmt.Errorf("overload: ThrottleOptions.RetryAfter is %s: want 0 (the default, 100ms) or more", o.RetryAfter)
	}
	if o.K == 0 {
		o.K = 2
	}
	if o.Window == 0 {
		o.Window = 10 * time.Second
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = 100 * time.Millisecond
	}
	return &Throttle{k: o.K, slice: max(o.Window/10, 1), retry: o.RetryAfter}, nil
}

// Allow reports whether to send a call of criticality c: nil, or a
// *Refusal with Reason Throttled (counted as a call not accepted). A call
// sent is reported to Record when it ends: calls still in flight count
// for nothing, so a client that has not heard back yet does not throttle.
func (t *Throttle) Allow(c Criticality) error {
	c = min(c, CriticalPlus)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(time.Now())
	var calls, acc float64
	for i := range 10 {
		calls += t.calls[c][i]
		acc += t.acc[c][i]
	}
	if p := (calls - t.k*acc) / (calls + 1); p > 0 && rand.Float64() < p {
		t.calls[c][t.at%10]++
		return &Refusal{Criticality: c, RetryAfter: c.RetryAfter(t.retry)}
	}
	return nil
}

// Record reports how a call Allow let through ended: accepted unless the
// server refused it for overload or quota.
func (t *Throttle) Record(c Criticality, accepted bool) {
	c = min(c, CriticalPlus)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(time.Now())
	t.calls[c][t.at%10]++
	if accepted {
		t.acc[c][t.at%10]++
	}
}

// advance clears the slices that have passed since the last call.
func (t *Throttle) advance(now time.Time) {
	at := now.UnixNano() / int64(t.slice)
	for i := t.at + 1; i <= at && i <= t.at+10; i++ {
		for c := range levels {
			t.calls[c][i%10], t.acc[c][i%10] = 0, 0
		}
	}
	t.at = max(t.at, at)
}
