package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
	argcheck "github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/keyfunc"
)

// Limiter applies rules to gRPC calls. It is safe for concurrent use; make
// one per server with New and install its interceptors.
type Limiter struct {
	store tollgate.Store
	local tollgate.Store // FailLocal's in-process store (WithLocalStore); nil without
	// book holds the rules; SetRules swaps it whole.
	book atomic.Pointer[rulebook]
	// mu orders SetRules calls.
	mu     sync.Mutex
	shadow bool // WithShadow
	header string
	// calls is how the Limiter calls its store: a deadline, a breaker.
	calls    *storecall.Policy
	replicas int64
	// admittedTrailers: admitted calls carry the x-ratelimit-* trailers
	// (WithAdmittedTrailers).
	admittedTrailers bool
	tel              instruments
	settleTel        settleTelemetry
	seatTel          seatTelemetry
	seatTimeout      time.Duration // WithSeatTimeout
	storeTimeout     time.Duration // WithStoreTimeout
	ov               overrides
	// sender delivers what calls owe once they end; renewals are the
	// seats of calls still running (see Close).
	sender   sender
	renewals renewals
	log      *slog.Logger
	// clk is the time of the Limiter's own decisions (WithClock).
	clk clock
}

// New returns a Limiter that asks st for decisions. Every problem with the
// configuration is reported here, naming the rule, so that nothing is
// rejected at request time that could have been rejected at start-up: a
// missing store or rule, an empty or duplicate name, a malformed method
// pattern, a Replaces that names no rule, forms a cycle or leaves a rule
// nothing to apply to, a missing Key function, an invalid limit or two
// limits that would share a state, a Cost above a limit's capacity, an
// unknown mode.
func New(st tollgate.Store, opts ...Option) (*Limiter, error) {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	switch {
	case argcheck.Nil(st):
		return nil, errors.New("interceptor: the store is nil")
	case c.local != nil && argcheck.Nil(c.local):
		return nil, errors.New("interceptor: the local store (WithLocalStore) is nil")
	case c.replicas < 1:
		return nil, fmt.Errorf("interceptor: replicas must be >= 1, got %d", c.replicas)
	case c.overrideRefresh <= 0:
		return nil, fmt.Errorf("interceptor: the override refresh must be > 0, got %s", c.overrideRefresh)
	case c.clock.now == nil:
		return nil, errors.New("interceptor: the clock (WithClock) is nil")
	case c.seatTimeout < 0:
		return nil, fmt.Errorf("interceptor: the seat timeout must be >= 0, got %s", c.seatTimeout)
	}
	if err := validateHeader(c.requestIDHeader); err != nil {
		return nil, err
	}
	calls, err := storecall.New(st, storecall.Config{Timeout: c.storeTimeout, BreakerFailures: c.breakerFailures, BreakerCoolDown: c.breakerCoolDown})
	if err != nil {
		return nil, fmt.Errorf("interceptor: %w", err)
	}
	tel, err := newTelemetry(c.tracerProvider, c.meterProvider)
	if err != nil {
		return nil, fmt.Errorf("interceptor: creating metrics: %w", err)
	}
	l := &Limiter{
		store:            st,
		calls:            calls,
		header:           c.requestIDHeader,
		admittedTrailers: c.admittedTrailers,
		replicas:         c.replicas,
		tel:              tel,
		shadow:           c.shadow,
		local:            c.local,
		log:              c.logger,
		clk:              c.clock,
	}
	l.sender.clk = c.clock
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.settleTel, err = newSettleTelemetry(meterOf(c.meterProvider)); err != nil {
		return nil, fmt.Errorf("interceptor: creating metrics: %w", err)
	}
	if l.seatTel, err = newSeatTelemetry(meterOf(c.meterProvider)); err != nil {
		return nil, fmt.Errorf("interceptor: creating metrics: %w", err)
	}
	l.seatTimeout, l.storeTimeout = c.seatTimeout, c.storeTimeout
	book, err := l.compile(c.rules)
	if err != nil {
		return nil, err
	}
	l.book.Store(book)
	l.ov.init(st, l.clk, calls, c.overrideRefresh, c.storeTimeout, func() []*rule { return l.book.Load().rules })
	return l, nil
}

// rulebook is a Limiter's rules, compiled. SetRules replaces it whole, so
// a call follows the one it started with to its end.
type rulebook struct {
	rules   []*rule
	byName  map[string]*rule
	matcher matcher
}

// compile validates rules and compiles them into a rulebook: every error
// names the rule.
func (l *Limiter) compile(rules []Rule) (*rulebook, error) {
	if len(rules) == 0 {
		return nil, errors.New("interceptor: no rules: give at least one with WithRules")
	}
	b := &rulebook{byName: make(map[string]*rule, len(rules))}
	for i, r := range rules {
		r = r.clone() // the caller's slices stay the caller's
		r.Shadow = r.Shadow || l.shadow
		r, err := r.withInFlightMax()
		if err != nil {
			return nil, fmt.Errorf("interceptor: %w", err)
		}
		cr, err := compileRule(r, i, l.replicas, l.seatTimeout)
		if err != nil {
			return nil, fmt.Errorf("interceptor: %w", err)
		}
		if r.InFlight.Max > 0 {
			if _, ok := l.store.(tollgate.SeatStore); !ok {
				return nil, fmt.Errorf("interceptor: rule %q: InFlight needs a store that bounds calls in flight (tollgate.SeatStore), which %T is not", r.Name, l.store)
			}
		}
		if r.FailMode.kind == failLocal {
			if l.local == nil {
				return nil, fmt.Errorf("interceptor: rule %q: FailLocal needs a local store to decide in: give the Limiter one with WithLocalStore (a store.NewMemory())", r.Name)
			}
			if _, ok := l.local.(tollgate.SeatStore); !ok && r.InFlight.Max > 0 {
				return nil, fmt.Errorf("interceptor: rule %q: InFlight with FailLocal needs a local store that bounds calls in flight (tollgate.SeatStore), which %T is not", r.Name, l.local)
			}
		}
		if err := l.checkSettler(r); err != nil {
			return nil, err
		}
		// The same policy for every key function: an empty value is
		// missing, an oversized one invalid.
		cr.Key = keyfunc.Checked(r.Key)
		if b.byName[r.Name] != nil {
			return nil, fmt.Errorf("interceptor: rule %q: the name is used by an earlier rule: names keep the rules' buckets apart", r.Name)
		}
		b.rules = append(b.rules, cr)
		b.byName[r.Name] = cr
	}
	var err error
	if b.matcher, err = newMatcher(b.rules); err != nil {
		return nil, fmt.Errorf("interceptor: %w", err)
	}
	return b, nil
}

// SetRules replaces the Limiter's rules with rules, validated exactly as
// New validates them: on an error nothing changes. The new rules apply to
// calls that start after SetRules returns; calls already admitted finish
// under the rules they were admitted by. A rule that keeps its name (and
// its limits' algorithms and periods) keeps its callers' buckets, in the
// shared store and in FailLocal's local one.
func (l *Limiter) SetRules(rules ...Rule) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	book, err := l.compile(rules)
	if err != nil {
		return err
	}
	l.book.Store(book)
	l.ov.reset()
	return nil
}

// validateHeader accepts what gRPC accepts as a metadata key that is not
// binary and not reserved.
func validateHeader(h string) error {
	if h == "" {
		return errors.New("interceptor: the request id header is empty")
	}
	if strings.HasPrefix(h, "grpc-") || strings.HasSuffix(h, "-bin") {
		return fmt.Errorf("interceptor: request id header %q is reserved by gRPC or binary", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("interceptor: request id header %q: metadata keys are lower-case letters, digits, '-', '_' and '.'", h)
		}
	}
	return nil
}

// meterOf returns the interceptor's meter from mp, or from the global
// provider when mp is nil.
func meterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(instrumentationName)
}
