package interceptor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
)

// A handler that panics, caught by go-grpc-middleware's recovery
// interceptor chained outside the limiter (the README's chain), ends its
// call as an error does: its seat is freed and its settlement applied,
// with the codes.Internal status Settle sees. Unary calls and streams.
func TestPanickingHandlerEndsItsCall(t *testing.T) {
	var mu sync.Mutex
	var settled []codes.Code
	rule := interceptor.Rule{
		Name:        "panics",
		Key:         keyfunc.Metadata(tenantHeader),
		Limits:      interceptor.Fixed(tollgate.PerHour(3)),
		MaxInFlight: 1,
		// A failed call is free: its unit is given back.
		Settle: func(_ context.Context, _ any, err error) (int64, bool) {
			mu.Lock()
			settled = append(settled, status.Code(err))
			mu.Unlock()
			return 0, err != nil
		},
	}
	l := newLimiter(t, newMemory(t), interceptor.WithRules(rule))
	srv := &echo.Server{Before: func(context.Context, string) error { panic("the handler fails") }}
	c := serveWith(t, srv,
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(), l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(), l.StreamServerInterceptor()))
	ctx, cancel := context.WithTimeout(tenant(context.Background(), "a"), 10*time.Second)
	defer cancel()

	calls := map[string]func() error{
		"unary": func() error { _, err := c.Say(ctx, wrapperspb.String("hi")); return err },
		"stream": func() error {
			s, err := c.Chat(ctx)
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
	for _, name := range []string{"unary", "stream"} {
		t.Run(name, func(t *testing.T) {
			mu.Lock()
			settled = nil
			mu.Unlock()
			wantCode(t, calls[name](), codes.Unknown, "panic caught") // the recovery interceptor's answer
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			qs, err := l.Peek(ctx, "panics", interceptor.Caller{Value: "a"})
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				switch {
				case q.InFlight && q.InUse != 0:
					t.Errorf("%d seat held after the handler panicked, want 0: the seat leaked", q.InUse)
				case !q.InFlight && q.Available != 3:
					t.Errorf("available = %d after the handler panicked, want 3: the settlement was lost", q.Available)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(settled) != 1 || settled[0] != codes.Internal {
				t.Errorf("Settle saw %v, want one call ending with Internal", settled)
			}
		})
	}
}
