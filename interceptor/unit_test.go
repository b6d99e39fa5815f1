package interceptor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/store"
)

// The unit tests call a Limiter's unary interceptor directly, on a
// FakeClock shared by the Limiter and its Memory store, so that the
// background work (retries, drops, renewals, the overrides' refresh) runs
// when the test moves the clock, never after a sleep.

// errInjected is the failure faultyStore returns while told to.
var errInjected = errors.New("injected store failure")

// faultyStore is a Memory store whose settlements, seat renewals and seat
// releases fail while the test says so, counting the attempts.
type faultyStore struct {
	*store.Memory
	failSettle, failRenew, failRelease atomic.Bool
	settleCalls                        atomic.Int64
	// holdRenew, when set, holds every seat renewal until it is closed,
	// after sending on renewing.
	holdRenew atomic.Pointer[renewHold]
}

// renewHold holds seat renewals (faultyStore.holdRenew).
type renewHold struct{ renewing, release chan struct{} }

func (s *faultyStore) Settle(ctx context.Context, req tollgate.Request, admitted tollgate.Admission, cost int64) (tollgate.Decision, error) {
	s.settleCalls.Add(1)
	if s.failSettle.Load() {
		return tollgate.Decision{}, errInjected
	}
	return s.Memory.Settle(ctx, req, admitted, cost)
}

func (s *faultyStore) SettleAll(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64) ([]tollgate.Decision, error) {
	s.settleCalls.Add(1)
	if s.failSettle.Load() {
		return nil, errInjected
	}
	return s.Memory.SettleAll(ctx, reqs, admitted, costs)
}

func (s *faultyStore) SettleAllAndRelease(ctx context.Context, reqs []tollgate.Request, admitted []tollgate.Admission, costs []int64, release []tollgate.Seat) ([]tollgate.Decision, error) {
	if len(reqs) > 0 {
		s.settleCalls.Add(1)
	}
	if len(reqs) > 0 && s.failSettle.Load() || len(release) > 0 && s.failRelease.Load() {
		return nil, errInjected
	}
	return s.Memory.SettleAllAndRelease(ctx, reqs, admitted, costs, release)
}

func (s *faultyStore) RenewSeat(ctx context.Context, sl tollgate.Seat) (bool, error) {
	if h := s.holdRenew.Load(); h != nil {
		h.renewing <- struct{}{}
		<-h.release
	}
	if s.failRenew.Load() {
		return false, errInjected
	}
	return s.Memory.RenewSeat(ctx, sl)
}

func (s *faultyStore) ReleaseSeat(ctx context.Context, sl tollgate.Seat) error {
	if s.failRelease.Load() {
		return errInjected
	}
	return s.Memory.ReleaseSeat(ctx, sl)
}

// unit is a Limiter under test on a fake clock.
type unit struct {
	l   *interceptor.Limiter
	clk *fakeclock.Clock
	st  *faultyStore
	m   *meter
}

// start is where every unit's clock starts.
var start = time.Unix(1_760_000_000, 0)

// newUnit returns a Limiter over a faultyStore, both on one FakeClock, with
// the breaker off (the injected failures would open it).
func newUnit(t *testing.T, opts ...interceptor.Option) *unit {
	t.Helper()
	clk := fakeclock.New(start)
	u := &unit{clk: clk, st: &faultyStore{Memory: newMemory(t, store.WithClock(clk.Now))}, m: newMeter(t)}
	opts = append([]interceptor.Option{enginetest.Clock(clk), func(c *engine.Config) { c.MeterProvider = u.m.provider }, func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = -1, 0 }}, opts...)
	u.l = newLimiter(t, u.st, opts...)
	return u
}

// call makes one unary call of method from tenant, with h as its handler.
func (u *unit) call(tenant, method string, h grpc.UnaryHandler) error {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tenantHeader, tenant))
	_, err := u.l.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, h)
	return err
}

// ok is a handler that answers at once.
func ok(context.Context, any) (any, error) { return "ok", nil }

// flush waits until the end-of-call work owed is delivered or dropped.
func (u *unit) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.l.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// available returns what Peek says tenant has left under rule's first limit.
func (u *unit) available(t *testing.T, rule, tenant string) int64 {
	t.Helper()
	qs, err := u.l.Peek(context.Background(), rule, interceptor.Caller{Value: tenant})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 0 {
		t.Fatalf("Peek(%s, %s): no quota", rule, tenant)
	}
	return qs[0].Available
}

// counts returns the Sum[int64] metric name by the value of key.
func (m *meter) counts(t *testing.T, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, metric := range m.collect(t) {
		if metric.Name != name {
			continue
		}
		sum, ok := metric.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is %T, want a Sum[int64]", metric.Name, metric.Data)
		}
		for _, dp := range sum.DataPoints {
			out[attr(dp.Attributes, key)] += dp.Value
		}
	}
	return out
}

// histogram returns the count and sum of the histogram name.
func (m *meter) histogram(t *testing.T, name string) (count uint64, sum float64) {
	t.Helper()
	for _, metric := range m.collect(t) {
		if metric.Name != name {
			continue
		}
		h, ok := metric.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("%s is %T, want a Histogram[float64]", metric.Name, metric.Data)
		}
		for _, dp := range h.DataPoints {
			count += dp.Count
			sum += dp.Sum
		}
	}
	return count, sum
}

// wantCounts fails the test unless got has exactly the non-zero counts of
// want.
func wantCounts(t *testing.T, what string, got, want map[string]int64) {
	t.Helper()
	for k, v := range got {
		if v != want[k] {
			t.Errorf("%s[%s] = %d, want %d (all: %v)", what, k, v, want[k], got)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s[%s] = %d, want %d (all: %v)", what, k, got[k], v, got)
		}
	}
}
