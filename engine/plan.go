package engine

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
)

// scope is what one decision is about.
type scope uint8

const (
	scopeCall    scope = iota // a unary call or a stream's opening
	scopeMessage              // one message received on a stream
)

// String returns the value of the tollgate.scope attribute.
func (s scope) String() string {
	if s == scopeMessage {
		return "message"
	}
	return "call"
}

// Store keys. A key is the rule name, a NUL (which names cannot contain), a
// scope letter (c: the call, m: a stream message) and then either "k:" and
// the key function's value or "a" for the anonymous identity of
// ShareMissing. The prefixes are fixed-length after the name, so no value
// can make one rule's key equal another rule's, another scope's, or the
// anonymous one.
//
// A rule with several Fixed limits, or PerCaller ones, gives each limit its own state, a part
// of the identity named by the limit's period (partkey.Join): the
// identity stays the keys' leading part, which the Redis store makes their
// hash tag of, so one identity's limits share one Cluster slot and one
// script call decides them; and no two limits share a bucket.
var scopeLetter = [...]byte{scopeCall: 'c', scopeMessage: 'm'}

// limitPart names the state of limit l within its identity.
func limitPart(l tollgate.Limit) string { return partkey.ForLimit(l) }

// plan is how a rule decides one scope, fixed by New: the limits, the store
// keys, what a decision costs and the telemetry it records. A decision
// follows its plan and never branches on the scope.
type plan struct {
	rule  *rule
	scope scope
	// prefix is the store key prefix of an identified caller; anon is the
	// store key of ShareMissing's anonymous identity.
	prefix, anon string
	// limits are the static limits; when choose is not nil it chooses them
	// per identity instead (PerCaller), and chooser names it.
	limits  []limitPlan
	choose  func(ctx context.Context, key string) ([]tollgate.Limit, error)
	chooser string
	// multi: every limit's key is a part of the identity's (several Fixed
	// limits, and PerCaller; one Fixed limit keeps the identity's key as
	// it is).
	multi bool
	// explicitLocal is the rule's FailLocalAt cap where it applies (the
	// call scope); nil means the limit divided by the replicas.
	explicitLocal *tollgate.Limit
	replicas      int64
	// priced: Cost and CostFunc apply, and the call's request id is sent.
	// Otherwise every decision costs 1 and carries no request id.
	priced bool
	// inFlight is the rule's in-flight limit (calls only); nil without one.
	inFlight *inFlight
	tel      planTelemetry
}

// limitPlan is one limit of a plan with what its decisions need.
type limitPlan struct {
	limit tollgate.Limit
	// local is the FailLocal cap for limit.
	local tollgate.Limit
	// part names the limit's state within the identity (limitPart);
	// empty unless the plan is multi.
	part string
	// policy is the limit's name where its rule decides several limits
	// (limitPlan.policyName); made once for a rule's fixed limits, empty
	// for the others.
	policy string
}

// newLimitPlan returns the plan of limit under p's local-cap policy.
func (p *plan) newLimitPlan(limit tollgate.Limit) limitPlan {
	lp := limitPlan{
		limit: limit,
		local: localLimit(limit, p.explicitLocal, p.replicas),
	}
	if p.multi {
		lp.part = limitPart(limit)
	}
	return lp
}

// limitsFor returns the limits of the identity value (the key function's
// result), or fills res with the rejection.
func (p *plan) limitsFor(ctx context.Context, value string, res *result) ([]limitPlan, bool) {
	if p.choose == nil {
		return p.limits, true
	}
	limits, err := p.choose(ctx, value)
	if err != nil {
		res.fail(outcomeError, err, "rate limit %q: %s failed: %v", p.rule.Name, p.chooser, err)
		return nil, false
	}
	if len(limits) == 0 || len(limits) > tollgate.MaxAllowAll {
		res.reject(outcomeInvalid, Fault, nil, "rate limit %q: %s returned %d limits, want 1 to %d", p.rule.Name, p.chooser, len(limits), tollgate.MaxAllowAll)
		return nil, false
	}
	for i, limit := range limits {
		if err := limit.Validate(); err != nil {
			at := ""
			if p.multi {
				at = " " + strconv.Itoa(i)
			}
			res.reject(outcomeInvalid, Fault, err, "rate limit %q: %s returned an invalid limit%s: %v", p.rule.Name, p.chooser, at, err)
			return nil, false
		}
	}
	if err := distinctLimits(limits); err != nil {
		res.reject(outcomeInvalid, Fault, err, "rate limit %q: %s: %v", p.rule.Name, p.chooser, err)
		return nil, false
	}
	out := make([]limitPlan, len(limits))
	for i, limit := range limits {
		out[i] = p.newLimitPlan(limit)
	}
	return out, true
}

// overrideLimits returns the plans of an override's limits. Several limits
// each keep a part of the identity, as Limits do; one keeps the identity's
// own state when the rule's limit does, so its bucket carries over.
func (p *plan) overrideLimits(limits []tollgate.Limit) []limitPlan {
	out := make([]limitPlan, len(limits))
	for i, limit := range limits {
		out[i] = p.newLimitPlan(limit)
		if len(limits) > 1 && out[i].part == "" {
			out[i].part = limitPart(limit)
		}
	}
	return out
}

// newPlan returns the plan of r for scope s with its static limits, or,
// with choose, the function choosing them per identity.
func newPlan(r *rule, s scope, limits []tollgate.Limit, choose limitChooser, replicas int64) *plan {
	head := r.Name + "\x00" + string(scopeLetter[s])
	p := &plan{rule: r, scope: s, prefix: head + "k:", anon: head + "a", replicas: replicas, priced: s == scopeCall}
	if s == scopeCall {
		p.explicitLocal = r.FailMode.explicitLocal()
		p.multi = r.Limits.kind == limitsPerCaller || len(r.Limits.fixed) > 1
		p.choose, p.chooser = choose.fn, choose.name
	}
	for _, l := range limits {
		p.limits = append(p.limits, p.newLimitPlan(l))
	}
	for i := range p.limits {
		p.limits[i].policy = policyOf(r.Name, p.limits[i].limit, p.limits)
	}
	p.tel = newPlanTelemetry(r.Name, s, limits, r.Shadow)
	return p
}

// planTelemetry is one plan's precomputed span name, start options and
// metric attribute sets, so that recording a decision builds no attribute
// set.
type planTelemetry struct {
	spanName  string
	spanStart []trace.SpanStartOption
	// Options are kept in one-element slices: passing a slice on needs no
	// allocation, building one for a variadic interface call does.
	decisions [numOutcomes][2][]metric.AddOption // by outcome, allowed
	storeOK   []metric.RecordOption
	storeErr  []metric.RecordOption
	// rule is the attribute set of the rule alone (seat metrics).
	rule []metric.RecordOption
	// limitPerCall: the span start does not name the limit, the decision does.
	limitPerCall bool
}
