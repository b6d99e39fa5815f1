package interceptor

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// A denied call never reaches the handler. The rate-limit metadata is set
// with grpc.SetTrailer, never as headers, so that the handler's own errors
// stay retryable by the client's retry policy.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r := l.matcher.match(info.FullMethod)
		if r == nil {
			return handler(ctx, req)
		}
		res := l.decide(ctx, r.call, info.FullMethod, req)
		if md := res.trailer(); md != nil {
			// SetTrailer fails only outside a gRPC server call, where there
			// is no one to tell.
			_ = grpc.SetTrailer(ctx, md)
		}
		if res.err != nil {
			return nil, res.err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor that limits streams: one
// decision, at the rule's Cost, when the stream opens, and, for rules with
// PerMessage, one for every message the client sends. The trailers describe
// the stream's last decision.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		r := l.matcher.match(info.FullMethod)
		if r == nil {
			return handler(srv, ss)
		}
		res := l.decide(ss.Context(), r.call, info.FullMethod, nil)
		if res.err != nil {
			if md := res.trailer(); md != nil {
				ss.SetTrailer(md)
			}
			return res.err
		}
		if r.PerMessage == nil {
			if md := res.trailer(); md != nil {
				ss.SetTrailer(md)
			}
			return handler(srv, ss)
		}
		ls := &limitedStream{ServerStream: ss, l: l, r: r, method: info.FullMethod, last: res}
		err := handler(srv, ls)
		// Set once, after the handler: SetTrailer appends, and the client
		// should see one value per key.
		last := ls.lastResult()
		if md := last.trailer(); md != nil {
			ss.SetTrailer(md)
		}
		return err
	}
}

// limitedStream makes one decision per received message.
type limitedStream struct {
	grpc.ServerStream
	l      *Limiter
	r      *rule
	method string

	mu   sync.Mutex
	last result // the latest decision with something to say in trailers
}

func (s *limitedStream) lastResult() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *limitedStream) remember(res result) {
	if res.hasDecision() {
		s.mu.Lock()
		s.last = res
		s.mu.Unlock()
	}
}

// RecvMsg receives a message and then has it judged: a message that never
// arrives costs nothing.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx := s.Context()
	var waited time.Duration
	for {
		res := s.l.decide(ctx, s.r.message, s.method, nil)
		s.remember(res)
		if res.err == nil || !res.hasDecision() || s.r.StreamMode != Shape {
			return res.err
		}
		// Shape: wait until the same message fits, within the bound and
		// the stream's life. A zero wait would spin, so wait at least 1ms.
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > s.r.maxShapeWait {
			return res.err
		}
		waited += wait
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// sleep waits for d or until ctx is done, whichever is first, and then
// returns ctx's error as a status.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
