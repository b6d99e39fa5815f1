package rls

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	argcheck "github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/storecall"
)

// Request bounds. A request beyond them is refused with
// codes.InvalidArgument before anything is matched or stored.
const (
	// maxDescriptors is the most descriptors one request may carry.
	maxDescriptors = 256
	// maxEntries is the most entries one descriptor may have.
	maxEntries = 64
)

// Server answers Envoy's ShouldRateLimit from a tollgate.Store. It is safe
// for concurrent use; SetConfig swaps the configuration while calls run.
type Server struct {
	pb.UnimplementedRateLimitServiceServer

	store  tollgate.Store
	config atomic.Pointer[Config]
	opts   options
	calls  *storecall.Policy
	tel    *instruments
}

var _ pb.RateLimitServiceServer = (*Server)(nil)

// NewServer returns a Server deciding with st. An invalid option is an
// error here.
func NewServer(st tollgate.Store, opts Options) (*Server, error) {
	o := opts.resolve()
	switch {
	case argcheck.Nil(st):
		return nil, errors.New("rls: the store is nil")
	case o.storeFail != AnswerUnavailable && o.storeFail != AnswerOK:
		return nil, fmt.Errorf("rls: store fail answer %s: want AnswerUnavailable or AnswerOK", o.storeFail)
	}
	calls, err := storecall.New(st, o.storeCalls)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	for _, name := range o.headerNames {
		if err := validHeaderName(name); err != nil {
			return nil, err
		}
	}
	tel, err := newTelemetry(o.tracerProvider, o.meterProvider)
	if err != nil {
		return nil, fmt.Errorf("rls: telemetry: %w", err)
	}
	s := &Server{store: st, opts: o, calls: calls, tel: tel}
	if o.config == nil {
		o.config = &Config{}
	}
	s.config.Store(o.config)
	return s, nil
}

func validHeaderName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("rls: header name %q: only printable ASCII without spaces or ':'", name)
		}
	}
	return nil
}

// SetConfig replaces the configuration. Calls in flight finish with the
// configuration they started with; no call is dropped. Limits whose
// descriptors keep their keys keep their state.
func (s *Server) SetConfig(c *Config) {
	if c == nil {
		c = &Config{}
	}
	s.config.Store(c)
}

// Config returns the configuration in use.
func (s *Server) Config() *Config { return s.config.Load() }

// ShouldRateLimit decides every descriptor of req. Limited descriptors that
// are not in shadow mode are decided all or nothing with one
// Store.AllowAll: a request refused by one of them debits none of the
// others. An unknown domain or a descriptor no limit matches is OK. A
// malformed or oversized request is codes.InvalidArgument; a store that
// cannot decide gives the fail mode's answer.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	ctx, span := s.tel.tracer.Start(ctx, "ratelimit", s.tel.spanStart...)
	defer span.End()
	resp, overall, err := s.shouldRateLimit(ctx, span, req)
	s.tel.recordCall(span, req.GetDomain(), len(req.GetDescriptors()), overall, err)
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, span trace.Span, req *pb.RateLimitRequest) (*pb.RateLimitResponse, outcome, error) {
	if err := checkRequest(req); err != nil {
		return nil, storecall.OutcomeInvalid, err
	}
	descs := req.GetDescriptors()
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(descs))}
	d := s.config.Load().domains[req.GetDomain()]
	if d == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		}
		if s.opts.metadata {
			resp.DynamicMetadata = dynamicMetadata(req, nil)
		}
		return resp, storecall.OutcomeAllowed, nil
	}
	// Only configured domains name spans: span names stay few.
	span.SetName("ratelimit " + d.name)
	checks, err := s.plan(d, req)
	if err != nil {
		return nil, storecall.OutcomeInvalid, err
	}
	overall, err := s.decide(ctx, d.name, checks)
	s.recordChecks(ctx, checks)
	if s.opts.hits != nil {
		s.opts.hits.count(checks)
	}
	if err != nil {
		return nil, overall, err
	}
	for i := range checks {
		resp.Statuses[i] = checks[i].status()
	}
	if overall == storecall.OutcomeDenied {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.headers {
		resp.ResponseHeadersToAdd = s.headers(checks)
	}
	if s.opts.metadata {
		resp.DynamicMetadata = dynamicMetadata(req, checks)
	}
	return resp, overall, nil
}

// checkRequest refuses what no configuration could make sense of.
func checkRequest(req *pb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(descs) == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(descs) > maxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", len(descs), maxDescriptors)
	case len(req.GetDomain()) > tollgate.MaxKeyLen:
		return status.Errorf(codes.InvalidArgument, "domain is %d bytes, more than %d", len(req.GetDomain()), tollgate.MaxKeyLen)
	}
	for i, desc := range descs {
		switch {
		case len(desc.GetEntries()) > maxEntries:
			return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries, more than %d", i, len(desc.GetEntries()), maxEntries)
		case keyLen(req.GetDomain(), desc.GetEntries()) > tollgate.MaxKeyLen:
			return status.Errorf(codes.InvalidArgument, "descriptor %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen)
		}
	}
	return nil
}
