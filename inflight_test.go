package tollgate_test

// In-flight limits (Rule.InFlight) across replicas sharing one store.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
)

// inFlightRule bounds one tenant's calls of every method to max at once.
func inFlightRule(t *testing.T, max int64, seatTimeout time.Duration) interceptor.Rule {
	return interceptor.Rule{
		Name:     "in-flight " + redistest.KeyPrefix(t),
		Methods:  []string{echo.AllMethods},
		Key:      keyfunc.Metadata(tenantHeader),
		InFlight: interceptor.InFlight{Max: max, SeatTimeout: seatTimeout},
	}
}

// peak counts the handlers running at once and the most seen.
type peak struct {
	running, most atomic.Int64
}

func (p *peak) enter() {
	n := p.running.Add(1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *peak) leave() { p.running.Add(-1) }

// 4 replicas on one store, 64 callers of one tenant, handlers of 30ms and
// 5 calls in flight at most: at no instant do more than 5 handlers run,
// 5 do, and every caller is admitted in the end by retrying.
func TestInFlightAcrossReplicas(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := inFlightRule(t, 5, 0)
		var p peak
		srv := &echo.Server{Before: func(context.Context, string) error {
			p.enter()
			defer p.leave()
			time.Sleep(30 * time.Millisecond)
			return nil
		}}
		var clients []*echo.Client
		var limiters []*interceptor.Limiter
		for range 4 {
			limiters = append(limiters, limiter(t, st, interceptor.WithRules(r)))
			clients = append(clients, serve(t, limiters[len(limiters)-1], srv, nil))
		}
		var denials atomic.Int64
		var wg sync.WaitGroup
		for i := range 64 {
			c := clients[i%4]
			wg.Go(func() {
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					_, _, err := say(tenant("a"), c)
					switch status.Code(err) {
					case codes.OK:
						return
					case codes.ResourceExhausted:
						denials.Add(1)
						time.Sleep(5 * time.Millisecond)
					default:
						t.Errorf("call: %v", err)
						return
					}
				}
				t.Error("a caller was never admitted")
			})
		}
		wg.Wait()
		if got := p.most.Load(); got != 5 {
			t.Fatalf("at most %d handlers ran at once, want exactly 5", got)
		}
		if denials.Load() == 0 {
			t.Fatal("no call was refused: the test proved nothing")
		}
		for _, l := range limiters {
			if err := l.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		l := limiter(t, st, interceptor.WithRules(r))
		q := inFlightQuota(t, l, r.Name, "a")
		if q.InUse != 0 || q.Available != 5 {
			t.Fatalf("after every call ended: %+v, want 0 seats in use", q)
		}
	})
}

// inFlightQuota returns what Peek says of rule's in-flight limit for tenant.
func inFlightQuota(t *testing.T, l *interceptor.Limiter, rule, tenantName string) engine.Quota {
	t.Helper()
	qs, err := l.Peek(context.Background(), rule, interceptor.Caller{Value: tenantName})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.InFlight {
			return q
		}
	}
	t.Fatalf("Peek(%q) = %+v: no in-flight quota", rule, qs)
	return engine.Quota{}
}

// A replica whose handlers never return, stopped with its calls still
// running, frees their seats once they expire (the rule's InFlight.SeatTimeout, as
// the calls have no deadline): another replica then admits.
func TestInFlightSeatsOfAStoppedReplicaExpire(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		const ttl = 600 * time.Millisecond
		r := inFlightRule(t, 2, ttl)
		hang := make(chan struct{})
		t.Cleanup(func() { close(hang) })
		entered := make(chan struct{}, 2)
		stuck := &echo.Server{Before: func(context.Context, string) error {
			entered <- struct{}{}
			<-hang // ignores its context: only the test's end frees it
			return nil
		}}
		var dead *grpc.Server
		conn := grpctest.Serve(t, func(s *grpc.Server) { dead = s; echo.Register(s, stuck) },
			[]grpc.ServerOption{grpc.ChainUnaryInterceptor(limiter(t, st, interceptor.WithRules(r)).UnaryServerInterceptor())})
		c := echo.NewClient(conn)
		for range 2 {
			go func() { _, _, _ = say(tenant("a"), c) }()
			<-entered
		}
		other := serve(t, limiter(t, st, interceptor.WithRules(r)), &echo.Server{}, nil)
		_, _, err := say(tenant("a"), other)
		wantCode(t, err, codes.ResourceExhausted, "in-flight")
		stopped := time.Now()
		dead.Stop() // the handlers go on: the seats are freed only by expiring
		redistest.Eventually(t, time.Until(stopped.Add(ttl+time.Second)), func() error {
			_, _, err := say(tenant("a"), other)
			if err == nil {
				return nil
			}
			wantCode(t, err, codes.ResourceExhausted, "in-flight")
			return fmt.Errorf("still refused after the replica stopped; its seats should expire within %s", ttl)
		})
		if waited := time.Since(stopped); waited < ttl/3 {
			t.Errorf("admitted %s after the stop: the stopped replica's seats were freed before they could expire", waited)
		}
	})
}

// A stream longer than its seat's TTL keeps the seat (renewals), and frees
// it when it ends.
func TestInFlightStreamRenewsItsSeat(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		const ttl = 300 * time.Millisecond
		r := inFlightRule(t, 1, ttl)
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, &echo.Server{}, nil)
		stream, err := c.Chat(tenant("a"))
		if err != nil {
			t.Fatal(err)
		}
		until := time.Now().Add(3 * ttl)
		for time.Now().Before(until) {
			if err := stream.Send(wrapperspb.String("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatalf("the stream failed while open: %v", err)
			}
			_, _, err := say(tenant("a"), c)
			wantCode(t, err, codes.ResourceExhausted, "in-flight")
			redistest.Elapse(ttl / 5) // the stream lives on, longer than its seat's TTL
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("stream end: %v", err)
		}
		redistest.Eventually(t, time.Second, func() error {
			if _, _, err := say(tenant("a"), c); err != nil {
				return fmt.Errorf("after the stream ended: %v; its seat should be free", err)
			}
			return nil
		})
	})
}

// A rate-limited call takes no seat, and a call refused for lack of a seat
// debits no rate.
func TestInFlightBesideARate(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		r := inFlightRule(t, 1, 0)
		r.Limits = interceptor.Fixed(tollgate.PerHour(2))
		release := make(chan struct{})
		entered := make(chan struct{}, 1)
		srv := &echo.Server{Before: func(ctx context.Context, _ string) error {
			entered <- struct{}{}
			<-release
			return nil
		}}
		l := limiter(t, st, interceptor.WithRules(r))
		c := serve(t, l, srv, nil)
		done := make(chan error, 1)
		go func() { _, _, err := say(tenant("a"), c); done <- err }()
		<-entered
		_, _, err := say(tenant("a"), c)
		st2 := wantCode(t, err, codes.ResourceExhausted, "in-flight")
		if _, quota := grpctest.DenialDetails(st2); len(quota.GetViolations()) != 1 || quota.GetViolations()[0].GetQuotaValue() != 1 {
			t.Errorf("QuotaFailure = %v, want the in-flight limit of 1", quota)
		}
		if q := peekOne(t, l, r.Name, interceptor.Caller{Value: "a"}, time.Hour); q.Available != 1 {
			t.Errorf("rate available = %d after a refusal for lack of a seat, want 1: it debited", q.Available)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		entered = make(chan struct{}, 2)
		if _, _, err := say(tenant("a"), c); err != nil {
			t.Fatalf("second call: %v", err)
		}
		_, _, err = say(tenant("a"), c)
		wantCode(t, err, codes.ResourceExhausted, "rate limit")
		if err := l.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if q := inFlightQuota(t, l, r.Name, "a"); q.InUse != 0 {
			t.Errorf("a call refused by its rate holds a seat: %+v", q)
		}
	})
}

// A seat whose release fails (the store does not answer when the call
// ends) is released by the Limiter's sender once the store answers: the
// call's own answer is unchanged, and the next call on the replica is
// admitted as soon as Redis is back, long before the seat would expire.
func TestInFlightFailedReleaseIsRetried(t *testing.T) {
	redistest.SkipFaultShort(t)
	srv := redistest.Start(t)
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	const ttl = 5 * time.Second
	r := inFlightRule(t, 1, ttl)
	l := limiter(t, newRedis(t, rc), interceptor.WithRules(r), interceptor.WithStoreTimeout(100*time.Millisecond))
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	c := serve(t, l, &echo.Server{Before: func(context.Context, string) error {
		select {
		case entered <- struct{}{}:
			<-release
		default: // the later calls
		}
		return nil
	}}, nil)
	done := make(chan error, 1)
	go func() { _, _, err := say(tenant("a"), c); done <- err }()
	<-entered
	ends := srv.Pause(t, 3*time.Second)
	ended := time.Now()
	close(release) // the call ends while the store is paused: its release fails
	if err := <-done; err != nil {
		t.Fatalf("the call whose release failed: %v, want its own answer", err)
	}
	// Answered while Redis was still paused: not held by the release (the
	// pause, not a timed bound, is the proof).
	if time.Now().After(ends) {
		t.Errorf("the response came %s after its handler returned, once the pause had ended: held by the release", time.Since(ended))
	}
	srv.AwaitAnswer(t, 5*time.Second)
	redistest.Eventually(t, time.Until(ends.Add(5*time.Second)), func() error {
		_, _, err := say(tenant("a"), c)
		if err == nil {
			return nil
		}
		wantCode(t, err, codes.ResourceExhausted, "in-flight")
		return fmt.Errorf("still refused after the call ended and Redis came back; the release was not retried")
	})
}

// After 20 calls of 200ms on one replica (on its clock, which the
// handler moves), a replica that served none of the identity's calls
// suggests, when it finds no free seat, the wait the fleet observed (the
// mean hold time the store keeps beside the seats), not the held seat's
// expiry (the call's deadline, 5s, plus a margin).
func TestInFlightRetryInfoFromTheFleet(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st tollgate.Store) {
		t.Parallel()
		r := inFlightRule(t, 1, 0)
		clock := fakeclock.New(time.Now()) // replica A's: how long its calls held their seats
		hold, held := make(chan struct{}), make(chan struct{})
		srv := &echo.Server{Before: func(ctx context.Context, _ string) error {
			if metadata.ValueFromIncomingContext(ctx, "x-hold") != nil {
				close(held)
				<-hold
				return nil
			}
			clock.Advance(200 * time.Millisecond)
			return nil
		}}
		la := limiter(t, st, interceptor.WithRules(r), func(c *engine.Config) { c.Clock = clock.Now })
		a := serve(t, la, srv, nil)
		b := serve(t, limiter(t, st, interceptor.WithRules(r)), srv, nil)
		for i := range 20 {
			if _, _, err := say(tenant("a"), a); err != nil {
				t.Fatalf("call %d on replica A: %v", i, err)
			}
		}
		if err := la.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(tenant("a"), 5*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, _, err := say(metadata.AppendToOutgoingContext(ctx, "x-hold", "1"), a)
			done <- err
		}()
		<-held
		_, _, err := say(tenant("a"), b)
		retry, _ := grpctest.DenialDetails(wantCode(t, err, codes.ResourceExhausted, "in-flight"))
		if wait := retry.GetRetryDelay().AsDuration(); wait <= 0 || wait > 600*time.Millisecond {
			t.Errorf("a fresh replica's in-flight denial suggests %s, want at most 600ms (the fleet's calls took 200ms)", wait)
		}
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
