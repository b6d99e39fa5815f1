package interceptor_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// chatRule limits Chat streams to 2 opens an hour per tenant and every
// message sent on them by perMessage.
func chatRule(perMessage engine.MessageLimit) interceptor.Rule {
	return interceptor.Rule{
		Name:       "chat",
		Methods:    []string{echo.ChatMethod},
		Key:        keyfunc.Metadata(tenantHeader),
		Limits:     interceptor.Fixed(tollgate.PerHour(2)),
		PerMessage: perMessage,
	}
}

func TestStreamOpenIsLimited(t *testing.T) {
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(chatRule(engine.MessageLimit{})), interceptor.WithAdmittedTrailers()))
	ctx := tenant(context.Background(), "a")
	for i := range 2 {
		s, err := c.Chat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Without PerMessage, messages are free.
		if n, err := grpctest.Chat(s, 5); err != nil || n != 5 {
			t.Fatalf("stream %d: %d echoes, %v", i+1, n, err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d ended with %v, want io.EOF", i+1, err)
		}
		if got, want := one(t, s.Trailer(), fields.LegacyRemaining), strconv.Itoa(1-i); got != want {
			t.Errorf("stream %d: remaining %s, want %s", i+1, got, want)
		}
		header, _ := s.Header()
		noRateLimitHeaders(t, header)
	}
	s, err := c.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	st := wantCode(t, err, codes.ResourceExhausted, `rate limit "chat" exceeded`)
	if len(st.Details()) != 2 {
		t.Errorf("details = %v, want RetryInfo and QuotaFailure", st.Details())
	}
	if one(t, s.Trailer(), fields.RetryAfter) == "" {
		t.Error("no retry-after trailer")
	}
}

func TestStreamPerMessagePolice(t *testing.T) {
	per := tollgate.Limit{Rate: 1, Period: time.Hour, Burst: 3}
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(chatRule(engine.MessageLimit{Limit: per}))))
	s, err := c.Chat(tenant(context.Background(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := grpctest.Chat(s, 10)
	if n != 3 {
		t.Fatalf("%d messages echoed, want 3", n)
	}
	wantCode(t, err, codes.ResourceExhausted, `rate limit "chat" exceeded`)
	// The trailers describe the last decision, once each.
	tr := s.Trailer()
	if one(t, tr, fields.LegacyLimit) != "3" || one(t, tr, fields.LegacyRemaining) != "0" || one(t, tr, fields.RetryAfter) == "" {
		t.Errorf("trailers %v, want the per-message denial", tr)
	}
	// Messages have their own bucket: the stream opens left the other one
	// at 1 of 2.
	s, err = c.Chat(tenant(context.Background(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpctest.Chat(s, 1); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream's first message: %v, want ResourceExhausted (3 messages an hour are spent)", err)
	}
	s, err = c.Chat(tenant(context.Background(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := grpctest.Chat(s, 3); n != 3 || err != nil {
		t.Fatalf("tenant b: %d echoes, %v; want 3", n, err)
	}
}

func TestStreamPerMessageShape(t *testing.T) {
	m := newMeter(t)
	// One message every 200ms: the client sends faster, so the limiter
	// holds messages back instead of failing the stream.
	per := tollgate.Limit{Rate: 5, Period: time.Second, Burst: 1}
	clk := fakeclock.New(start)
	l := newLimiter(t, newMemory(t, store.WithClock(clk.Now)), enginetest.Clock(clk), func(c *engine.Config) { c.MeterProvider = m.provider },
		interceptor.WithRules(chatRule(engine.MessageLimit{Limit: per, Shape: true})))
	c := serve(t, l)
	s, err := c.Chat(tenant(context.Background(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	const messages = 4
	for i := range messages {
		if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Each message after the first is held back exactly 200ms.
	for i := 1; i < messages; i++ {
		due := start.Add(time.Duration(i) * 200 * time.Millisecond)
		clk.WaitTimer(t, due)
		clk.Advance(200 * time.Millisecond)
	}
	for i := range messages {
		got, err := s.Recv()
		if err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if got.GetValue() != strconv.Itoa(i) {
			t.Fatalf("echo %d = %q", i, got.GetValue())
		}
	}
	_ = s.CloseSend()
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	d := m.decisions(t)
	if d["chat/message/allowed/true"] != messages || d["chat/message/denied/false"] != messages-1 {
		t.Fatalf("decisions %v: want %d messages allowed, each after the first held back once", d, messages)
	}
}

// serveObserved serves l and reports on ended how every Chat handler ended.
func serveObserved(t *testing.T, l *interceptor.Limiter) (*echo.Client, <-chan error) {
	ended := make(chan error, 4)
	observe := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		if info.FullMethod == echo.ChatMethod {
			ended <- err
		}
		return err
	}
	return serveWith(t, &echo.Server{}, grpc.ChainStreamInterceptor(observe, l.StreamServerInterceptor())), ended
}

// A wait longer than Shape's maxWait fails at once, as Police would.
func TestStreamShapeBound(t *testing.T) {
	per := tollgate.Limit{Rate: 1, Period: time.Hour, Burst: 1}
	r := chatRule(engine.MessageLimit{Limit: per, Shape: true, MaxWait: 10 * time.Millisecond})
	c, ended := serveObserved(t, newLimiter(t, newMemory(t), interceptor.WithRules(r)))
	s, err := c.Chat(tenant(context.Background(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := grpctest.Chat(s, 2)
	if n != 1 {
		t.Fatalf("%d echoes, want 1", n)
	}
	wantCode(t, err, codes.ResourceExhausted, `rate limit "chat" exceeded`)
	wantCode(t, <-ended, codes.ResourceExhausted, "chat")
}

// A long wait ends when the client goes away.
func TestStreamShapeHonoursCancellation(t *testing.T) {
	m := newMeter(t)
	per := tollgate.Limit{Rate: 1, Period: time.Hour, Burst: 1}
	r := chatRule(engine.MessageLimit{Limit: per, Shape: true, MaxWait: 2 * time.Hour})
	clk := fakeclock.New(start)
	c, ended := serveObserved(t, newLimiter(t, newMemory(t, store.WithClock(clk.Now)), enginetest.Clock(clk), func(c *engine.Config) { c.MeterProvider = m.provider }, interceptor.WithRules(r)))
	ctx, cancel := context.WithCancel(tenant(context.Background(), "a"))
	defer cancel()
	s, err := c.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := grpctest.Chat(s, 1); n != 1 || err != nil {
		t.Fatalf("first message: %d, %v", n, err)
	}
	if err := s.Send(wrapperspb.String("held back")); err != nil {
		t.Fatal(err)
	}
	// Held back for the hour its unit takes to come back.
	clk.WaitTimer(t, start.Add(time.Hour))
	if n := m.decisions(t)["chat/message/denied/false"]; n != 1 {
		t.Fatalf("%d denials of the second message, want 1", n)
	}
	cancel()
	if _, err := s.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("client Recv after cancel: %v, want Canceled", err)
	}
	select {
	case err := <-ended:
		wantCode(t, err, codes.Canceled, "")
	case <-time.After(10 * time.Second):
		t.Fatal("the handler is still waiting after its client went away")
	}
}

// A stream's opening that finds no free seat waits for one up to the
// rule's InFlight.StreamWait, asking again after each suggested wait (here
// the first seat's expiry, 1s); without StreamWait it is refused at once.
func TestStreamWaitsForASeat(t *testing.T) {
	inFlight := func(wait time.Duration) interceptor.Rule {
		return interceptor.Rule{Name: "chat", Methods: []string{echo.ChatMethod}, Key: keyfunc.Metadata(tenantHeader),
			InFlight: interceptor.InFlight{Max: 1, SeatTimeout: time.Second, StreamWait: wait}}
	}
	t.Run("refused at once", func(t *testing.T) {
		c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(inFlight(0))))
		a, err := c.Chat(tenant(context.Background(), "a"))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := grpctest.Chat(a, 1); n != 1 || err != nil {
			t.Fatalf("the first stream: %d echoes, %v", n, err)
		}
		b, err := c.Chat(tenant(context.Background(), "a"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Recv()
		wantCode(t, err, codes.ResourceExhausted, `in-flight limit "chat" exceeded`)
		_ = a.CloseSend()
	})
	t.Run("waits", func(t *testing.T) {
		clk := fakeclock.New(start)
		m := newMeter(t)
		l := newLimiter(t, newMemory(t, store.WithClock(clk.Now)), enginetest.Clock(clk), func(c *engine.Config) { c.MeterProvider = m.provider },
			interceptor.WithRules(inFlight(5*time.Second)))
		c := serve(t, l)
		a, err := c.Chat(tenant(context.Background(), "a"))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := grpctest.Chat(a, 1); n != 1 || err != nil {
			t.Fatalf("the first stream: %d echoes, %v", n, err)
		}
		b, err := c.Chat(tenant(context.Background(), "a"))
		if err != nil {
			t.Fatal(err)
		}
		clk.WaitTimer(t, start.Add(time.Second)) // b waits for a's seat to expire
		_ = a.CloseSend()
		if _, err := a.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("end of the first stream: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Flush(ctx); err != nil { // a's seat is released
			t.Fatal(err)
		}
		clk.Advance(time.Second) // b asks again, and gets it
		if n, err := grpctest.Chat(b, 1); n != 1 || err != nil {
			t.Fatalf("the second stream: %d echoes, %v; want it admitted after its wait", n, err)
		}
		_ = b.CloseSend()
		if _, err := b.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("end of the second stream: %v", err)
		}
		if n, sum := m.histogram(t, telemetry.MetricSeatWait); n != 1 || sum != 1 {
			t.Errorf("seat wait = %d values summing to %gs, want one of 1s", n, sum)
		}
	})
}
