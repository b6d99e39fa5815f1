package main

// The settle section: what a settled call and an in-flight seat cost Redis
// beside one decision and beside redis_rate, at the store (64 callers, 10k
// identities) and through the interceptor over bufconn (32 callers).

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// settleCallers is the concurrency of the section's gRPC cells.
const settleCallers = 32

// unfolded is the store option of the anchor cells: every seat or settle
// call a script call of its own (concurrent ones still share round trips),
// as before the store folded them.
var unfolded = store.WithBatchScript(false)

// settleLimit admits every call of the section: the write paths are
// measured.
func settleLimit(tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
}

// settled is one call of the store cells: a decision of cost 500 with a
// request id, settled at 7, and an in-flight seat, in the ways a subject
// combines them.
type settled struct {
	st   *store.Redis
	mode settleMode
	tail *finisher // the ends, batched as the Limiter's sender does
}

type settleMode uint8

const (
	decisionOnly   settleMode = iota // Allow
	decisionSettle                   // Allow, then Settle
	decisionTail                     // Allow, then the settlement to the finisher
	seatOnly                         // AcquireSeat, then ReleaseSeat
	together                         // AllowAllWithSeat, then SettleAllAndRelease
	togetherTail                     // AllowAllWithSeat, then the end to the finisher
	settleOnly                       // Settle alone, of a reservation of 500 at 7
)

func (s settled) Decide(ctx context.Context, identity, requestID string) (bool, error) {
	req := tollgate.Request{Key: identity, Limit: settleLimit(0), Cost: 500, RequestID: requestID}
	seat := tollgate.Seat{Key: identity, Max: 1000, ID: requestID, TTL: time.Minute}
	switch s.mode {
	case seatOnly:
		d, err := s.st.AcquireSeat(ctx, seat)
		if err != nil || !d.Allowed {
			return false, err
		}
		return true, s.st.ReleaseSeat(ctx, seat)
	case together, togetherTail:
		sd, ds, err := s.st.AllowAllWithSeat(ctx, seat, []tollgate.Request{req})
		if err != nil || !sd.Allowed {
			return false, err
		}
		if s.mode == togetherTail {
			s.tail.add(req, ds[0], &seat)
			return true, nil
		}
		_, err = s.st.SettleAllAndRelease(ctx, []tollgate.Request{req}, []tollgate.Admission{ds[0].Admission()}, []int64{7}, []tollgate.Seat{seat})
		return true, err
	}
	if s.mode == settleOnly {
		_, err := s.st.Settle(ctx, req, tollgate.Admission{At: time.Now(), ResetAfter: time.Second}, 7)
		return err == nil, err
	}
	d, err := s.st.Allow(ctx, req)
	if err != nil || !d.Allowed {
		return false, err
	}
	switch s.mode {
	case decisionSettle:
		_, err = s.st.Settle(ctx, req, d.Admission(), 7)
	case decisionTail:
		s.tail.add(req, d, nil)
	}
	return true, err
}

// finisher delivers ends as the Limiter's sender does: whatever ended
// meanwhile, at most tollgate.MaxAllowAll settlements per call, in one
// SettleAllAndRelease call, from one goroutine. A caller waits only when
// a batch's worth is already waiting, so memory stays bounded.
type finisher struct {
	st   *store.Redis
	mu   sync.Mutex
	cond *sync.Cond
	reqs []tollgate.Request
	adms []tollgate.Admission
	rel  []tollgate.Seat
	stop bool
	done chan struct{}
}

func newFinisher(st *store.Redis) *finisher {
	f := &finisher{st: st, done: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	go f.run()
	return f
}

func (f *finisher) add(req tollgate.Request, d tollgate.Decision, seat *tollgate.Seat) {
	f.mu.Lock()
	for len(f.reqs) >= 2*tollgate.MaxAllowAll {
		f.cond.Wait()
	}
	f.reqs, f.adms = append(f.reqs, req), append(f.adms, d.Admission())
	if seat != nil {
		f.rel = append(f.rel, *seat)
	}
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *finisher) run() {
	defer close(f.done)
	for {
		f.mu.Lock()
		for len(f.reqs) == 0 && !f.stop {
			f.cond.Wait()
		}
		if len(f.reqs) == 0 {
			f.mu.Unlock()
			return
		}
		n := min(len(f.reqs), tollgate.MaxAllowAll)
		reqs, adms := append([]tollgate.Request(nil), f.reqs[:n]...), append([]tollgate.Admission(nil), f.adms[:n]...)
		var rel []tollgate.Seat
		if len(f.rel) > 0 {
			rel = append(rel, f.rel[:n]...)
			f.rel = f.rel[n:]
		}
		f.reqs, f.adms = f.reqs[n:], f.adms[n:]
		f.mu.Unlock()
		f.cond.Broadcast()
		costs := make([]int64, n)
		for i := range costs {
			costs[i] = 7
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := f.st.SettleAllAndRelease(ctx, reqs, adms, costs, rel); err != nil {
			fmt.Fprintln(os.Stderr, "load: settle: finisher:", err)
		}
		cancel()
	}
}

// close delivers what is left and stops the goroutine.
func (f *finisher) close() {
	f.mu.Lock()
	f.stop = true
	f.mu.Unlock()
	f.cond.Broadcast()
	<-f.done
}

// settledSubject is a store cell of mode; opts (store.WithBatchScript(false):
// one script call per seat or admit call, the design before folding) are
// the store's.
func settledSubject(name string, mode settleMode, opts ...store.RedisOption) subject {
	return subject{name: name, requestID: true, make: func(m *measurer, _ func(tollgate.Algorithm) tollgate.Limit) (bench.Decider, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix())}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		s := settled{st: st, mode: mode}
		if mode == decisionTail || mode == togetherTail {
			s.tail = newFinisher(st)
		}
		return s, func() {
			if s.tail != nil {
				s.tail.close()
			}
			_ = c.Close()
		}, nil
	}}
}

// settleServer is tollgate's interceptor on its Redis store with one rule
// of cost 500, settled at 7 when settle is set, with an in-flight bound
// when inFlight is set.
func settleServer(name string, reference, settle, inFlight bool) server {
	return server{name: name, reference: reference, interceptors: func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		st, err := redisStore(c, store.WithPrefix(prefix()))
		if err != nil {
			return nil, nil, err
		}
		r := interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limits: interceptor.Fixed(settleLimit(0)), Cost: 500}
		if settle {
			r.Settle = func(context.Context, any, error) (int64, bool) { return 7, true }
		}
		if inFlight {
			r.InFlight.Max = 1000
		}
		// A generous store deadline: on a shared machine a 50ms one turns
		// slow cells into fail-open admissions, which measure nothing.
		lim, err := interceptor.New(st, interceptor.WithRules(r), interceptor.WithStoreTimeout(time.Second))
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := lim.Close(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "load: settle:", err)
			}
			_ = c.Close()
		}, nil
	}}
}

func (m *measurer) settleSection(ctx context.Context) ([]row, error) {
	ids := make([]string, m.cfg.identities)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	subjects := m.filter([]subject{
		redisRateSubject(),
		settledSubject("decision (request id, cost 500)", decisionOnly),
		settledSubject("decision + Settle", decisionSettle),
		settledSubject("Settle alone, a script call each", settleOnly, unfolded),
		settledSubject("Settle alone, folded", settleOnly),
		settledSubject("decision + settlements batched as the sender does", decisionTail),
		settledSubject("AcquireSeat + ReleaseSeat, a script call each", seatOnly, unfolded),
		settledSubject("AcquireSeat + ReleaseSeat, folded", seatOnly),
		settledSubject("seat+decision, then settle+release (one script call each)", together),
		settledSubject("seat+decision, then settle+release batched as the sender does", togetherTail),
	})
	var rows []row
	for _, callers := range m.cfg.callers {
		r, err := m.compare(ctx, "settle", "random", callers, subjects, func(s subject) (*sample, error) {
			d, release, err := s.make(m, settleLimit)
			if err != nil {
				return nil, err
			}
			defer release()
			return m.cell(ctx, d, callers, ids, s.requestID)
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	servers := []server{
		settleServer("gRPC: rate rule, cost 500", true, false, false),
		settleServer("gRPC: the same rule, settled", false, true, false),
		settleServer("gRPC: the same rule, MaxInFlight", false, false, true),
		settleServer("gRPC: the same rule, MaxInFlight and settled", false, true, true),
	}
	r, err := m.compareServers(ctx, "settle", servers, ids, settleCallers)
	fmt.Fprintln(os.Stderr, "load: settle done")
	return append(rows, r...), err
}
