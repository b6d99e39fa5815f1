package engine

import (
	"errors"
	"fmt"
	"log/slog"
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

// Limiter decides calls by its rules, for every door that asks it
// (Begin). It is safe for concurrent use; make one per server with New,
// and give it to every door of the server, so that a caller has one quota
// on all of them.
type Limiter struct {
	store tollgate.Store
	local tollgate.Store // FailLocal's in-process store (Config.LocalStore); nil without
	// book holds the rules; SetRules swaps it whole.
	book atomic.Pointer[rulebook]
	// mu orders SetRules calls.
	mu sync.Mutex
	// header is the request id header, lower-case, and requestIDs reads it
	// (its case folded once).
	header     string
	requestIDs func(keyfunc.Header) ([]string, error)
	// calls is how the Limiter calls its store: a deadline, a breaker.
	calls    *storecall.Policy
	replicas int64
	// admittedTrailers: the RPC doors report admitted calls' limits too
	// (Config.AdmittedTrailers).
	admittedTrailers bool
	tel              instruments
	settleTel        settleTelemetry
	seatTel          seatTelemetry
	seatTimeout      time.Duration // Config.SeatTimeout
	storeTimeout     time.Duration // Config.StoreTimeout
	ov               overrides
	// sender delivers what calls owe once they end; renewals are the
	// seats of calls still running (see Close).
	sender   sender
	renewals renewals
	log      *slog.Logger
	// clk is the time of the Limiter's own decisions (Config.Clock).
	clk clock
	// refused counts the identities refused (refused.go); health follows
	// whether the store answers (health.go).
	refused refusedBook
	health  health
	// admission is overload control (Config.Overload); nil without.
	admission   *admission
	overloadTel overloadTelemetry
}

// New returns a Limiter that asks st for decisions, configured by c (its
// zero value is the default of every setting). Every problem with the
// configuration is reported here, naming the rule, so that nothing is
// rejected at request time that could have been rejected at start-up: a
// missing store or rule, an empty or duplicate name, a method or route no
// call can ever be named by, a Replaces that names no rule, forms a cycle
// or leaves a rule nothing to apply to, a missing Key function, an invalid
// limit or two limits that would share a state, a Cost above a limit's
// capacity, a setting out of range.
func New(st tollgate.Store, c Config) (*Limiter, error) {
	if argcheck.Nil(st) {
		return nil, errors.New("engine: the store is nil")
	}
	s, err := c.settle()
	if err != nil {
		return nil, err
	}
	calls, err := storecall.New(st, s.breaker)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	tel, err := newTelemetry(s.TracerProvider, s.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("engine: creating metrics: %w", err)
	}
	l := &Limiter{
		store:            st,
		calls:            calls,
		header:           s.header,
		requestIDs:       keyfunc.Values(s.header),
		admittedTrailers: s.AdmittedTrailers,
		replicas:         int64(s.Replicas),
		tel:              tel,
		local:            s.LocalStore,
		log:              s.Logger,
		clk:              s.clock,
		seatTimeout:      s.SeatTimeout,
		storeTimeout:     s.StoreTimeout,
	}
	l.sender.clk = s.clock
	if l.settleTel, err = newSettleTelemetry(meterOf(s.MeterProvider)); err != nil {
		return nil, fmt.Errorf("engine: creating metrics: %w", err)
	}
	if l.seatTel, err = newSeatTelemetry(meterOf(s.MeterProvider)); err != nil {
		return nil, fmt.Errorf("engine: creating metrics: %w", err)
	}
	if err := l.refused.init(s.Refused); err != nil {
		return nil, err
	}
	if err := l.health.init(s.Logger, meterOf(s.MeterProvider)); err != nil {
		return nil, fmt.Errorf("engine: creating metrics: %w", err)
	}
	if err := l.overloadTel.init(meterOf(s.MeterProvider), l.rulesInForce); err != nil {
		return nil, fmt.Errorf("engine: creating metrics: %w", err)
	}
	if l.admission, err = newAdmission(s.Overload, "", nil, &l.overloadTel); err != nil {
		return nil, fmt.Errorf("engine: Overload: %w", err)
	}
	book, err := l.compile(s.Rules)
	if err != nil {
		return nil, err
	}
	l.book.Store(book)
	l.ov.init(st, l.clk, calls, s.OverrideRefresh, s.StoreTimeout, l.rulesInForce)
	return l, nil
}

// rulesInForce returns the rules in force; none before New has compiled
// them.
func (l *Limiter) rulesInForce() []*rule {
	if b := l.book.Load(); b != nil {
		return b.rules
	}
	return nil
}

// AdmittedTrailers reports whether the RPC doors send the rate-limit
// trailers on admitted calls too (Config.AdmittedTrailers).
func (l *Limiter) AdmittedTrailers() bool { return l.admittedTrailers }

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
	if len(rules) == 0 && l.admission == nil { // overload control alone is a use
		return nil, errors.New("engine: no rules: give at least one (Config.Rules) or Config.Overload")
	}
	b := &rulebook{byName: make(map[string]*rule, len(rules))}
	for i, r := range rules {
		r = r.clone() // the caller's slices stay the caller's
		r, err := r.withInFlightMax()
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		cr, err := compileRule(r, i, l.replicas, l.seatTimeout)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if r.InFlight.Max > 0 {
			if _, ok := l.store.(tollgate.SeatStore); !ok {
				return nil, fmt.Errorf("engine: rule %q: InFlight needs a store that bounds calls in flight (tollgate.SeatStore), which %T is not", r.Name, l.store)
			}
		}
		if r.FailMode.kind == failLocal {
			if l.local == nil {
				return nil, fmt.Errorf("engine: rule %q: FailLocal needs a local store to decide in: give the Limiter one (Config.LocalStore: a store.NewMemory())", r.Name)
			}
			if _, ok := l.local.(tollgate.SeatStore); !ok && r.InFlight.Max > 0 {
				return nil, fmt.Errorf("engine: rule %q: InFlight with FailLocal needs a local store that bounds calls in flight (tollgate.SeatStore), which %T is not", r.Name, l.local)
			}
		}
		if err := l.checkSettler(r); err != nil {
			return nil, err
		}
		var prev *admission
		if old := l.book.Load(); old != nil && old.byName[r.Name] != nil {
			prev = old.byName[r.Name].admission
		}
		if cr.admission, err = newAdmission(r.Overload, r.Name, prev, &l.overloadTel); err != nil {
			return nil, fmt.Errorf("engine: rule %q: Overload: %w", r.Name, err)
		}
		// The same policy for every key function: an empty value is
		// missing, an oversized one invalid.
		cr.Key = keyfunc.Checked(r.Key)
		if b.byName[r.Name] != nil {
			return nil, fmt.Errorf("engine: rule %q: the name is used by an earlier rule: names keep the rules' buckets apart", r.Name)
		}
		b.rules = append(b.rules, cr)
		b.byName[r.Name] = cr
	}
	var err error
	if b.matcher, err = newMatcher(b.rules); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
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

// meterOf returns the interceptor's meter from mp, or from the global
// provider when mp is nil.
func meterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(instrumentationName)
}
