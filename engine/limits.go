package engine

import (
	"context"
	"slices"

	"github.com/tollgate/tollgate"
)

// Limits are a rule's rate limits: the same for every caller (Fixed), or
// chosen per caller when a call arrives (PerCaller). The zero value is no
// rate limit, for a rule that only bounds calls in flight (InFlight).
type Limits struct {
	kind      limitsKind
	fixed     []tollgate.Limit
	perCaller func(ctx context.Context, key string) ([]tollgate.Limit, error)
}

type limitsKind uint8

const (
	limitsNone limitsKind = iota
	limitsFixed
	limitsPerCaller
)

// Fixed returns limits enforced together for every caller: a call is
// admitted only if every limit admits its cost, and a denied call debits
// none of them ("10 per second and 10,000 per day"). New validates them:
// 1 to tollgate.MaxAllowAll limits, each admitting the rule's Cost, no two
// with the same Algorithm and Period (or Calendar), which would share one
// state. One limit keeps its state under the caller's key as it is;
// several keep one part of it each.
func Fixed(limits ...tollgate.Limit) Limits {
	return Limits{kind: limitsFixed, fixed: slices.Clone(limits)}
}

// PerCaller returns limits that f chooses for each caller when a call
// arrives (tiers per tenant, for example). f gets the Key function's value,
// or "" for the anonymous identity of ShareMissing, and must return 1 to
// tollgate.MaxAllowAll limits, no two with the same Algorithm and Period
// (or Calendar), enforced together as Fixed's are; each keeps one part of
// the caller's state, so a limit the caller's tier keeps across a change
// keeps its count. Its result is validated on every call: an invalid one,
// or an error, refuses the call as a Fault (a door passes on a status the
// error carries: a gRPC status, to a gRPC caller).
// The limiter caches nothing f returns: cache in f, bounded, if needed.
func PerCaller(f func(ctx context.Context, key string) ([]tollgate.Limit, error)) Limits {
	return Limits{kind: limitsPerCaller, perCaller: f}
}

// List returns a copy of the limits ls enforces for every caller: those
// given to Fixed, or nil for PerCaller limits and the zero value.
func (ls Limits) List() []tollgate.Limit {
	return slices.Clone(ls.fixed)
}

// IsPerCaller reports whether ls are chosen per caller (made by PerCaller).
func (ls Limits) IsPerCaller() bool {
	return ls.kind == limitsPerCaller
}

// clone returns ls with its fixed limits copied.
func (ls Limits) clone() Limits {
	ls.fixed = slices.Clone(ls.fixed)
	return ls
}
