// Package admin serves tollgate.admin.v1 (admin/v1/admin.proto) over an
// engine.Limiter (an interceptor.Limiter's is its Limiter field): support staff read a caller's remaining quota under
// a rule (GetQuota), give it back (ResetQuota), list the rules (ListRules)
// and change a caller's limits or block it on every replica at once
// (SetOverride, Block, DeleteOverride, ListOverrides), with any gRPC
// client, grpcurl included.
//
// The service is off unless registered. It changes rate-limit state, so
// serve it on a listener of its own, behind an authorization interceptor,
// never on the public port:
//
//	adminSrv := grpc.NewServer(grpc.ChainUnaryInterceptor(requireAdmin))
//	if err := admin.Register(adminSrv, limiter); err != nil {
//		log.Fatal(err)
//	}
//	go adminSrv.Serve(adminListener)
package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate"
	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/grpcstatus"
	"github.com/tollgate/tollgate/keyfunc"
)

// Register registers the admin service of l on s. A nil s or l is an
// error.
func Register(s grpc.ServiceRegistrar, l *engine.Limiter) error {
	if check.Nil(s) {
		return errors.New("admin: the server to register on is nil")
	}
	srv, err := NewServer(l)
	if err != nil {
		return err
	}
	adminv1.RegisterAdminServer(s, srv)
	return nil
}

// NewServer returns the admin service of l, for servers that register it
// themselves. A nil l is an error.
func NewServer(l *engine.Limiter) (adminv1.AdminServer, error) {
	if l == nil {
		return nil, errors.New("admin: the Limiter is nil")
	}
	return &server{l: l}, nil
}

type server struct {
	adminv1.UnimplementedAdminServer
	l *engine.Limiter
}

// GetQuota returns the state of every limit of the rule for the caller.
func (s *server) GetQuota(ctx context.Context, req *adminv1.GetQuotaRequest) (*adminv1.GetQuotaResponse, error) {
	who, err := caller(req.GetCaller())
	if err != nil {
		return nil, err
	}
	qs, err := s.l.Peek(ctx, req.GetRule(), who)
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	resp := &adminv1.GetQuotaResponse{}
	for _, q := range qs {
		switch {
		case q.Blocked:
			resp.Quotas = append(resp.Quotas, &adminv1.Quota{Blocked: true, Cost: q.Cost, ExpiresIn: expiresIn(q.Expires)})
			continue
		case q.InFlight:
			resp.Quotas = append(resp.Quotas, &adminv1.Quota{
				InFlight: true, InUse: q.InUse, MaxInFlight: q.MaxInFlight, Available: q.Available,
				Cost: q.Cost, Allowed: q.Decision.Allowed, RetryAfter: positive(q.Decision.RetryAfter),
			})
			continue
		}
		resp.Quotas = append(resp.Quotas, &adminv1.Quota{
			Limit:      q.Limit.String(),
			Algorithm:  q.Limit.Algorithm.String(),
			Rate:       q.Limit.Rate,
			Period:     durationpb.New(q.Limit.Period),
			Capacity:   q.Limit.Capacity(),
			PerMessage: q.PerMessage,
			Available:  q.Available,
			Cost:       q.Cost,
			Allowed:    q.Decision.Allowed,
			RetryAfter: durationpb.New(q.Decision.RetryAfter),
			ResetAfter: durationpb.New(q.Decision.ResetAfter),
			Override:   q.Override,
			ExpiresIn:  expiresIn(q.Expires),
			Full:       q.Available >= q.Limit.Capacity(),
		})
	}
	return resp, nil
}

// ResetQuota gives the caller its whole quota back under the rule.
func (s *server) ResetQuota(ctx context.Context, req *adminv1.ResetQuotaRequest) (*adminv1.ResetQuotaResponse, error) {
	who, err := caller(req.GetCaller())
	if err != nil {
		return nil, err
	}
	if err := s.l.Reset(ctx, req.GetRule(), who); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &adminv1.ResetQuotaResponse{}, nil
}

// TopRefused names the callers the rule refused most over a recent window.
func (s *server) TopRefused(ctx context.Context, req *adminv1.TopRefusedRequest) (*adminv1.TopRefusedResponse, error) {
	top, err := s.l.TopRefused(ctx, req.GetRule(), int(req.GetLimit()), req.GetLocal())
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	resp := &adminv1.TopRefusedResponse{
		Start: timestamppb.New(top.Start), End: timestamppb.New(top.End),
		Shadow: top.Shadow, Hashed: top.Hashed, Replicas: int32(top.Replicas),
		Total: top.Total, Floor: top.Floor,
	}
	for _, e := range top.Top {
		resp.Top = append(resp.Top, &adminv1.RefusedCaller{Id: e.ID, Count: e.Count, Min: e.Min, Max: e.Max})
	}
	return resp, nil
}

// ListRules describes the Limiter's rules.
func (s *server) ListRules(context.Context, *adminv1.ListRulesRequest) (*adminv1.ListRulesResponse, error) {
	resp := &adminv1.ListRulesResponse{}
	for _, r := range s.l.Rules() {
		out := &adminv1.Rule{
			Name:          r.Name,
			Methods:       r.Methods,
			DynamicLimits: r.Limits.IsPerCaller(),
			FailMode:      r.FailMode.String(),
			Shadow:        r.Shadow,
			Replaces:      r.Replaces,
			MaxInFlight:   r.InFlight.Max,
			Settled:       r.Settle != nil,
			Overload:      r.Overload != nil,
		}
		for _, l := range r.Limits.List() {
			out.Limits = append(out.Limits, l.String())
		}
		if len(out.Limits) > 0 || out.DynamicLimits {
			out.Cost = max(r.Cost, 1)
		}
		if r.PerMessage.Limit != (tollgate.Limit{}) {
			out.PerMessage = r.PerMessage.Limit.String()
		}
		resp.Rules = append(resp.Rules, out)
	}
	return resp, nil
}

// SetOverride replaces the rule's limits for the caller.
func (s *server) SetOverride(ctx context.Context, req *adminv1.SetOverrideRequest) (*adminv1.SetOverrideResponse, error) {
	who, err := caller(req.GetCaller())
	if err != nil {
		return nil, err
	}
	limits := make([]tollgate.Limit, len(req.GetLimits()))
	for i, l := range req.GetLimits() {
		if limits[i], err = limitOf(l); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "override of rule %q: limits[%d]: %v", req.GetRule(), i, err)
		}
	}
	if err := s.l.SetOverride(ctx, req.GetRule(), who, limits, req.GetTtl().AsDuration()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &adminv1.SetOverrideResponse{}, nil
}

// Block refuses the caller's calls under the rule.
func (s *server) Block(ctx context.Context, req *adminv1.BlockRequest) (*adminv1.BlockResponse, error) {
	who, err := caller(req.GetCaller())
	if err != nil {
		return nil, err
	}
	if err := s.l.Block(ctx, req.GetRule(), who, req.GetTtl().AsDuration()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &adminv1.BlockResponse{}, nil
}

// DeleteOverride ends the caller's override of the rule.
func (s *server) DeleteOverride(ctx context.Context, req *adminv1.DeleteOverrideRequest) (*adminv1.DeleteOverrideResponse, error) {
	who, err := caller(req.GetCaller())
	if err != nil {
		return nil, err
	}
	if err := s.l.DeleteOverride(ctx, req.GetRule(), who); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &adminv1.DeleteOverrideResponse{}, nil
}

// ListOverrides returns the rule's overrides in force.
func (s *server) ListOverrides(ctx context.Context, req *adminv1.ListOverridesRequest) (*adminv1.ListOverridesResponse, error) {
	os, err := s.l.Overrides(ctx, req.GetRule())
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	resp := &adminv1.ListOverridesResponse{}
	for _, o := range os {
		out := &adminv1.Override{Caller: &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: o.Caller.Value}}, Blocked: o.Blocked, ExpiresIn: expiresIn(o.Expires)}
		if o.Caller.Anonymous {
			out.Caller.Identity = &adminv1.Caller_Anonymous{Anonymous: true}
		}
		for _, l := range o.Limits {
			out.Limits = append(out.Limits, limitProto(l))
			out.Described = append(out.Described, l.String())
		}
		resp.Overrides = append(resp.Overrides, out)
	}
	return resp, nil
}

// positive is d, unset when it is 0 or less.
func positive(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// expiresIn is the time left until t, unset for a zero t (never).
func expiresIn(t time.Time) *durationpb.Duration {
	if t.IsZero() {
		return nil
	}
	return durationpb.New(max(time.Until(t), 0))
}

// algorithms and calendars are the names a Limit message may carry.
var (
	algorithms = []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow}
	calendars  = []tollgate.Calendar{tollgate.Day, tollgate.Week, tollgate.Month, tollgate.Year}
)

// names lists the String of each value, for an error.
func names[T fmt.Stringer](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = strconv.Quote(v.String())
	}
	return strings.Join(s, ", ")
}

// limitOf translates a Limit message; the limit itself is validated by
// the Limiter.
func limitOf(l *adminv1.Limit) (tollgate.Limit, error) {
	out := tollgate.Limit{Rate: l.GetRate(), Period: l.GetPeriod().AsDuration(), Burst: l.GetBurst()}
	found := false
	for _, a := range algorithms {
		if l.GetAlgorithm() == a.String() || l.GetAlgorithm() == "" && a == tollgate.TokenBucket {
			out.Algorithm, found = a, true
		}
	}
	if !found {
		return out, fmt.Errorf("unknown algorithm %q: want one of %s (empty means %q)", l.GetAlgorithm(), names(algorithms), tollgate.TokenBucket)
	}
	if c := l.GetCalendar(); c != "" {
		found = false
		for _, k := range calendars {
			if c == k.String() {
				out.Calendar, found = k, true
			}
		}
		if !found {
			return out, fmt.Errorf("unknown calendar %q: want one of %s, or empty for a window of the period", c, names(calendars))
		}
	}
	return out, nil
}

// limitProto is limitOf's inverse.
func limitProto(l tollgate.Limit) *adminv1.Limit {
	out := &adminv1.Limit{Algorithm: l.Algorithm.String(), Rate: l.Rate, Burst: l.Burst, Calendar: l.Calendar.String()}
	if l.Period > 0 {
		out.Period = durationpb.New(l.Period)
	}
	return out
}

// caller translates the request's caller.
func caller(c *adminv1.Caller) (engine.Caller, error) {
	switch id := c.GetIdentity().(type) {
	case *adminv1.Caller_Value:
		return engine.Caller{Value: id.Value}, nil
	case *adminv1.Caller_Join:
		return engine.Caller{Value: keyfunc.JoinValues(id.Join.GetValues()...)}, nil
	case *adminv1.Caller_FirstOf:
		return engine.Caller{Value: keyfunc.FirstOfValue(int(id.FirstOf.GetIndex()), id.FirstOf.GetValue())}, nil
	case *adminv1.Caller_Metadata:
		return engine.Caller{Metadata: metadata.New(id.Metadata.GetEntries()), Method: c.GetMethod()}, nil
	case *adminv1.Caller_Anonymous:
		if id.Anonymous {
			return engine.Caller{Anonymous: true}, nil
		}
	}
	return engine.Caller{}, status.Error(codes.InvalidArgument, "caller: set one of value, join, first_of, metadata or anonymous")
}
