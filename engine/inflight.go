package engine

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// seatMargin is added to a call's deadline for its seat's expiry: the
// handler may return a little after the deadline, give or take the clocks.
const seatMargin = time.Second

// inFlight is a plan's in-flight limit: at most max calls of one identity
// at once (localMax per replica under FailLocal), seats living ttl when
// the call has no deadline, a stream's opening waiting up to streamWait for
// one.
type inFlight struct {
	max, localMax   int64
	ttl, streamWait time.Duration
	// policy is its name where its rule decides other limits of a call
	// too (LimitDecision.Policy).
	policy string
}

// seatCheck is a check's in-flight seat: what it asks for (a stream's: for
// its life), the store's answer, and, while the check holds it, where it
// was taken and when.
type seatCheck struct {
	req    tollgate.Seat
	stream bool
	asked  bool
	dec    tollgate.SeatDecision
	store  tollgate.SeatStore // nil unless held
	local  bool
	at     time.Time
}

// refused reports that the store found no free seat for the check.
func (s *seatCheck) refused() bool { return s != nil && s.asked && !s.dec.Allowed }

// holding reports that the check holds its seat.
func (s *seatCheck) holding() bool { return s != nil && s.store != nil }

// seatRetryAfter is the wait a seat denial suggests, from the denied
// identity's own seats under the rule, never another's: how long its calls
// held their seats lately across the fleet, as the store keeps it (a seat
// usually frees up about then); or, when none was released lately, the
// first held seat's expiry, when one frees up for sure. Never past that
// expiry, and at least a millisecond.
func seatRetryAfter(c *check) time.Duration {
	wait := c.seat.dec.RetryAfter
	if hold := c.seat.dec.Hold; hold > 0 && hold < wait {
		wait = hold
	}
	return max(wait, time.Millisecond)
}

// heldSeat is a seat a call holds while its handler runs: renewed before
// it expires, released by the sender once the call ends.
type heldSeat struct {
	l     *Limiter
	ctx   context.Context // the call's: renewals stop once it is done
	p     *plan
	st    tollgate.SeatStore
	seat  tollgate.Seat
	local bool
	at    time.Time

	// mu guards timer and done, never a store call: the end of the call
	// (stop) must not wait for a renewal's round trip.
	mu    sync.Mutex
	timer timer // nil when the seat is not renewed
	done  bool

	// Written by the sender: the latest release attempt's outcome.
	released bool
	err      error
}

// holdSeat starts renewing c's seat, which it now holds for the call under
// ctx. Renewals stop once ctx is done: a handler that goes on after its
// call was cancelled or ran out of time holds the seat only until it
// expires, as a replica that died would. Close stops them too.
func (l *Limiter) holdSeat(ctx context.Context, c *check) *heldSeat {
	h := &heldSeat{l: l, ctx: ctx, p: c.p, st: c.seat.store, seat: c.seat.req, local: c.seat.local, at: c.seat.at}
	if !h.local {
		h.seat.Max = c.p.inFlight.max
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !l.renewals.add(h) {
		h.done = true // the Limiter is closed: nothing renews it
		return h
	}
	h.timer = l.clk.afterFunc(renewEvery(h.seat.TTL), h.renew)
	return h
}

// renewEvery is how often a seat of ttl is renewed: a third of it, so that
// two renewals can fail before it expires.
func renewEvery(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// renew moves the seat's expiry on, for calls that outlive it. It holds
// no lock across the store call, so the call's end never waits for it; a
// renewal that returns after the call ended records nothing (the seat is
// the sender's to release, and the store renews no released seat).
func (h *heldSeat) renew() {
	h.mu.Lock()
	stopped, seat := h.done || h.ctx.Err() != nil, h.seat // end writes h.seat once done
	h.mu.Unlock()
	if stopped {
		return
	}
	var ok bool
	err := h.l.seatCall(context.Background(), h.local, func(ctx context.Context) (err error) {
		ok, err = h.st.RenewSeat(ctx, seat)
		return err
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	switch {
	case err != nil:
		h.l.recordSeat(context.Background(), h.p, seatRenewFailed)
		h.l.log.Warn("rate limit: renewing an in-flight seat failed", "rule", h.p.rule.Name, "error", err)
	case !ok:
		h.l.recordSeat(context.Background(), h.p, seatLost)
		h.l.log.Warn("rate limit: an in-flight seat expired before its call ended", "rule", h.p.rule.Name, "ttl", h.seat.TTL)
	default:
		h.l.recordSeat(context.Background(), h.p, seatRenewed)
	}
	h.timer.Reset(renewEvery(h.seat.TTL))
}

// stop ends the seat's renewals.
func (h *heldSeat) stop() {
	h.mu.Lock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.l.renewals.remove(h)
}

// end stops renewing the seat and records how long its call held it: the
// call has ended. The release is the sender's.
func (h *heldSeat) end() {
	h.stop()
	d := h.l.clk.since(h.at)
	h.seat.Hold = d // the store keeps the identity's mean from it
	h.l.seatTel.hold.Record(context.Background(), d.Seconds(), metric.WithAttributes(telemetry.AttrRule.String(h.p.rule.Name)))
}

// release makes one attempt at freeing the seat under the store policy,
// and reports whether it was freed.
func (h *heldSeat) release(ctx context.Context) bool {
	h.err = h.l.seatCall(ctx, h.local, func(ctx context.Context) error { return h.st.ReleaseSeat(ctx, h.seat) })
	if h.err != nil {
		return false
	}
	h.l.recordSeat(ctx, h.p, seatReleased)
	return true
}

// renewals holds the seats being renewed, so that Close stops them.
type renewals struct {
	mu     sync.Mutex
	held   map[*heldSeat]struct{}
	closed bool
}

// add registers h, unless Close has stopped renewals.
func (r *renewals) add(h *heldSeat) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.held == nil {
		r.held = make(map[*heldSeat]struct{})
	}
	r.held[h] = struct{}{}
	return true
}

func (r *renewals) remove(h *heldSeat) {
	r.mu.Lock()
	delete(r.held, h)
	r.mu.Unlock()
}

// close stops every renewal, now and to come: the seats of calls still
// running expire at their TTL unless their calls end first.
func (r *renewals) close() {
	r.mu.Lock()
	held := r.held
	r.held, r.closed = nil, true
	r.mu.Unlock()
	for h := range held {
		h.mu.Lock()
		h.done = true
		h.timer.Stop()
		h.mu.Unlock()
	}
}

// seatOutcome is the value of telemetry.AttrSeatOutcome.
type seatOutcome uint8

const (
	seatAcquired      seatOutcome = iota // a call took a seat
	seatDeniedOutcome                    // a call found none free
	seatReleased                         // a call ended and gave its seat back
	seatReleaseFailed                    // the store could not take it back: it expires by itself
	seatRenewed                          // a long call moved its seat's expiry on
	seatRenewFailed                      // the store could not renew it
	seatLost                             // the seat expired before its call ended
	numSeatOutcomes
)

var seatOutcomeNames = [numSeatOutcomes]string{"acquired", "denied", "released", "release_failed", "renewed", "renew_failed", "lost"}

// seatBuckets are the bounds, in seconds, of the seat histograms: calls
// hold seats from a millisecond to minutes (a stream), so the buckets
// resolve each decade, where the SDK's defaults (0, 5, 10, … 10000) would
// put every hold under five seconds in one.
var seatBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600}

type seatTelemetry struct {
	events     metric.Int64Counter
	hold, wait metric.Float64Histogram
}

func newSeatTelemetry(meter metric.Meter) (seatTelemetry, error) {
	var t seatTelemetry
	var err error
	if t.events, err = meter.Int64Counter(telemetry.MetricSeats, metric.WithUnit("{event}"),
		metric.WithDescription("In-flight seat events, by rule and outcome.")); err != nil {
		return t, err
	}
	if t.hold, err = meter.Float64Histogram(telemetry.MetricSeatHold, metric.WithUnit("s"),
		metric.WithDescription("How long calls held their in-flight seats."),
		metric.WithExplicitBucketBoundaries(seatBuckets...)); err != nil {
		return t, err
	}
	t.wait, err = meter.Float64Histogram(telemetry.MetricSeatWait, metric.WithUnit("s"),
		metric.WithDescription("How long stream openings waited for an in-flight seat."),
		metric.WithExplicitBucketBoundaries(seatBuckets...))
	return t, err
}
