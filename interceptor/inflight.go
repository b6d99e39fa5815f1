package interceptor

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/telemetry"
)

// DefaultSeatTimeout is how long an in-flight seat lives when its call has
// no deadline, or between a stream's renewals, unless WithSeatTimeout or
// Rule.SeatTimeout say otherwise.
const DefaultSeatTimeout = 30 * time.Second

// slotMargin is added to a call's deadline for its slot's expiry: the
// handler may return a little after the deadline, give or take the clocks.
const slotMargin = time.Second

// inFlight is a plan's in-flight limit: at most max calls of one identity
// at once (localMax per replica under FailLocal), slots living ttl when
// the call has no deadline.
type inFlight struct {
	max, localMax int64
	ttl           time.Duration
	header        string // x-ratelimit-limit
	// hold is the recent mean time a slot was held on this replica, in
	// nanoseconds: the wait a denial suggests (see slotDenial).
	hold atomic.Int64
}

// held records that a slot was held for d.
func (f *inFlight) held(d time.Duration) {
	for {
		old := f.hold.Load()
		next := int64(d)
		if old > 0 {
			next = old - old/8 + int64(d)/8
		}
		if f.hold.CompareAndSwap(old, next) {
			return
		}
	}
}

// slotCheck is a check's in-flight slot: what it asks for (a stream's: for
// its life), the store's answer, and, while the check holds it, where it
// was taken and when.
type slotCheck struct {
	req    tollgate.Slot
	stream bool
	asked  bool
	dec    tollgate.SlotDecision
	store  tollgate.SlotStore // nil unless held
	local  bool
	at     time.Time
}

// refused reports that the store found no free slot for the check.
func (s *slotCheck) refused() bool { return s != nil && s.asked && !s.dec.Allowed }

// holding reports that the check holds its slot.
func (s *slotCheck) holding() bool { return s != nil && s.store != nil }

// prepareSlot fills c's slot request for the identity key under ctx's
// deadline: the call's request id names it, so that a retry reuses it.
func (c *check) prepareSlot(ctx context.Context, key, requestID string, stream bool) {
	f := c.p.inFlight
	ttl := f.ttl
	if deadline, ok := ctx.Deadline(); ok && !stream {
		ttl = max(time.Until(deadline), 0) + slotMargin
	}
	id := requestID
	if id == "" {
		id = newSlotID()
	}
	c.slot = &slotCheck{req: tollgate.Slot{Key: key, Max: f.max, ID: id, TTL: ttl}, stream: stream}
}

// newSlotID names the slot of a call that came without a request id.
func newSlotID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "slot-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// acquire takes the slots of checks on st, in order: all or none. It
// reports whether every check got its slot; a check that did not is
// marked, and the slots taken before it are given back.
func (l *Limiter) acquire(ctx context.Context, st tollgate.Store, checks []*check, local bool) (bool, error) {
	ss, _ := st.(tollgate.SlotStore)
	for i, c := range checks {
		if c.slot == nil {
			continue
		}
		s := c.slot.req
		if local {
			s.Max = c.p.inFlight.localMax
		}
		d, err := ss.AcquireSlot(ctx, s)
		if err != nil {
			l.releaseAll(ctx, checks[:i])
			return false, err
		}
		c.slot.asked, c.slot.dec = true, d
		l.recordSlot(ctx, c.p, map[bool]slotOutcome{true: slotAcquired, false: slotDeniedOutcome}[d.Allowed])
		if !d.Allowed {
			l.releaseAll(ctx, checks[:i])
			return false, nil
		}
		c.slot.store, c.slot.local, c.slot.at = ss, local, l.clk.now()
	}
	return true, nil
}

// releaseAll gives back the slots checks hold: their call does not go on.
// The releases go to the sender, as a call's end does.
func (l *Limiter) releaseAll(ctx context.Context, checks []*check) {
	var e ending
	for _, c := range checks {
		if !c.slot.holding() {
			continue
		}
		e.slots = append(e.slots, &heldSlot{l: l, ctx: ctx, p: c.p, st: c.slot.store, slot: c.slot.req, local: c.slot.local, at: c.slot.at})
		c.slot.store = nil
	}
	l.sender.add(l, &e)
}

// slotCall calls the store for a slot: the shared store under its policy
// (deadline, breaker), the local one as it is.
func (l *Limiter) slotCall(ctx context.Context, local bool, call func(context.Context) error) error {
	if local {
		return call(ctx)
	}
	_, _, err := l.calls.Do(ctx, call)
	return err
}

// slotDenied fills res with the denial of a check refused for lack of a
// slot.
func (res *result) slotDenied(c *check) {
	res.outcome = outcomeDenied
	res.decision = tollgate.Decision{RetryAfter: slotRetryAfter(c)}
	res.limitHeader = c.p.inFlight.header
	res.slotWait, res.maxShapeWait = c.p.rule.StreamMode == Shape && c.slot.stream, c.p.rule.maxShapeWait
	res.err = denial([]*check{c})
}

// slotRetryAfter is the wait a slot denial suggests: how long the
// identity's calls held their slots lately across the fleet, as the store
// keeps it (a slot usually frees up about then), or, when the store knows
// none, how long this rule's calls held theirs lately on this replica; but
// never past the first held slot's expiry, when one frees up for sure,
// and at least a millisecond.
func slotRetryAfter(c *check) time.Duration {
	wait := c.slot.dec.RetryAfter
	hold := c.slot.dec.Hold
	if hold <= 0 {
		hold = time.Duration(c.p.inFlight.hold.Load())
	}
	if hold > 0 && hold < wait {
		wait = hold
	}
	return max(wait, time.Millisecond)
}

// heldSlot is a slot a call holds while its handler runs: renewed before
// it expires, released by the sender once the call ends.
type heldSlot struct {
	l     *Limiter
	ctx   context.Context // the call's: renewals stop once it is done
	p     *plan
	st    tollgate.SlotStore
	slot  tollgate.Slot
	local bool
	at    time.Time

	mu    sync.Mutex
	timer timer // nil when the slot is not renewed
	done  bool

	// Written by the sender: the latest release attempt's outcome.
	released bool
	err      error
}

// holdSlot starts renewing c's slot, which it now holds for the call under
// ctx. Renewals stop once ctx is done: a handler that goes on after its
// call was cancelled or ran out of time holds the slot only until it
// expires, as a replica that died would. Close stops them too.
func (l *Limiter) holdSlot(ctx context.Context, c *check) *heldSlot {
	h := &heldSlot{l: l, ctx: ctx, p: c.p, st: c.slot.store, slot: c.slot.req, local: c.slot.local, at: c.slot.at}
	if !h.local {
		h.slot.Max = c.p.inFlight.max
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !l.renewals.add(h) {
		h.done = true // the Limiter is closed: nothing renews it
		return h
	}
	h.timer = l.clk.afterFunc(renewEvery(h.slot.TTL), h.renew)
	return h
}

// renewEvery is how often a slot of ttl is renewed: a third of it, so that
// two renewals can fail before it expires.
func renewEvery(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// renew moves the slot's expiry on, for calls that outlive it.
func (h *heldSlot) renew() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || h.ctx.Err() != nil {
		return
	}
	var ok bool
	err := h.l.slotCall(context.Background(), h.local, func(ctx context.Context) (err error) {
		ok, err = h.st.RenewSlot(ctx, h.slot)
		return err
	})
	switch {
	case err != nil:
		h.l.recordSlot(context.Background(), h.p, slotRenewFailed)
		h.l.log.Warn("rate limit: renewing an in-flight slot failed", "rule", h.p.rule.Name, "error", err)
	case !ok:
		h.l.recordSlot(context.Background(), h.p, slotLost)
		h.l.log.Warn("rate limit: an in-flight slot expired before its call ended", "rule", h.p.rule.Name, "ttl", h.slot.TTL)
	default:
		h.l.recordSlot(context.Background(), h.p, slotRenewed)
	}
	if !h.done {
		h.timer.Reset(renewEvery(h.slot.TTL))
	}
}

// stop ends the slot's renewals.
func (h *heldSlot) stop() {
	h.mu.Lock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.l.renewals.remove(h)
}

// end stops renewing the slot and records how long its call held it: the
// call has ended. The release is the sender's.
func (h *heldSlot) end() {
	h.stop()
	d := h.l.clk.since(h.at)
	h.slot.Held = d // the store keeps the fleet's mean from it
	h.p.inFlight.held(d)
	h.l.slotTel.hold.Record(context.Background(), d.Seconds(), metric.WithAttributes(telemetry.AttrRule.String(h.p.rule.Name)))
}

// release makes one attempt at freeing the slot under the store policy,
// and reports whether it was freed.
func (h *heldSlot) release(ctx context.Context) bool {
	h.err = h.l.slotCall(ctx, h.local, func(ctx context.Context) error { return h.st.ReleaseSlot(ctx, h.slot) })
	if h.err != nil {
		return false
	}
	h.l.recordSlot(ctx, h.p, slotReleased)
	return true
}

// renewals holds the slots being renewed, so that Close stops them.
type renewals struct {
	mu     sync.Mutex
	held   map[*heldSlot]struct{}
	closed bool
}

// add registers h, unless Close has stopped renewals.
func (r *renewals) add(h *heldSlot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.held == nil {
		r.held = make(map[*heldSlot]struct{})
	}
	r.held[h] = struct{}{}
	return true
}

func (r *renewals) remove(h *heldSlot) {
	r.mu.Lock()
	delete(r.held, h)
	r.mu.Unlock()
}

// close stops every renewal, now and to come: the slots of calls still
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

// newInFlight compiles a rule's in-flight limit; nil without MaxInFlight.
func newInFlight(r Rule, defaultTTL time.Duration, replicas int64) (*inFlight, error) {
	switch {
	case r.MaxInFlight < 0:
		return nil, fmt.Errorf("MaxInFlight must be >= 0, got %d", r.MaxInFlight)
	case r.MaxInFlight > tollgate.MaxRate:
		return nil, fmt.Errorf("MaxInFlight must be at most MaxRate (10^12), got %d", r.MaxInFlight)
	case r.SeatTimeout < 0:
		return nil, fmt.Errorf("SeatTimeout must be >= 0, got %s", r.SeatTimeout)
	case r.MaxInFlight == 0:
		return nil, nil
	}
	ttl := r.SeatTimeout
	if ttl == 0 {
		ttl = defaultTTL
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("SeatTimeout is 0 and so is the Limiter's (WithSeatTimeout): a seat of a call without a deadline would never expire")
	}
	return &inFlight{
		max: r.MaxInFlight, localMax: ceilDiv(r.MaxInFlight, replicas), ttl: ttl,
		header: strconv.FormatInt(r.MaxInFlight, 10),
	}, nil
}

// slotOutcome is the value of telemetry.AttrSeatOutcome.
type slotOutcome uint8

const (
	slotAcquired      slotOutcome = iota // a call took a slot
	slotDeniedOutcome                    // a call found none free
	slotReleased                         // a call ended and gave its slot back
	slotReleaseFailed                    // the store could not take it back: it expires by itself
	slotRenewed                          // a long call moved its slot's expiry on
	slotRenewFailed                      // the store could not renew it
	slotLost                             // the slot expired before its call ended
	numSlotOutcomes
)

var slotOutcomeNames = [numSlotOutcomes]string{"acquired", "denied", "released", "release_failed", "renewed", "renew_failed", "lost"}

type slotTelemetry struct {
	events     metric.Int64Counter
	hold, wait metric.Float64Histogram
}

func newSlotTelemetry(meter metric.Meter) (slotTelemetry, error) {
	var t slotTelemetry
	var err error
	if t.events, err = meter.Int64Counter(telemetry.MetricSeats, metric.WithUnit("{event}"),
		metric.WithDescription("In-flight slot events, by rule and outcome.")); err != nil {
		return t, err
	}
	if t.hold, err = meter.Float64Histogram(telemetry.MetricSeatHold, metric.WithUnit("s"),
		metric.WithDescription("How long calls held their in-flight slots.")); err != nil {
		return t, err
	}
	t.wait, err = meter.Float64Histogram(telemetry.MetricSeatWait, metric.WithUnit("s"),
		metric.WithDescription("How long stream openings waited for an in-flight slot."))
	return t, err
}

func (l *Limiter) recordSlot(ctx context.Context, p *plan, o slotOutcome) {
	l.slotTel.events.Add(ctx, 1, metric.WithAttributes(telemetry.AttrRule.String(p.rule.Name), telemetry.AttrSeatOutcome.String(slotOutcomeNames[o])))
}
