package orcaload_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // the balancer the reports are for
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/orcaload"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/store"
)

// replica serves the echo service over loopback TCP behind a Limiter with
// a fixed limit of 8 and the ORCA per-call reports of its load; held of its
// seats are taken by calls that run until the test ends.
func replica(t *testing.T, held int) (string, *engine.Limiter) {
	t.Helper()
	st, err := store.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := interceptor.New(st, interceptor.WithOverload(overload.Options{MinLimit: 8, MaxLimit: 8, InitialLimit: 8, ProbeInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(orcaload.ServerOptions(lim.Limiter), grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))...)
	echo.Register(srv, &echo.Server{})
	if err := orca.Register(srv, orca.ServiceOptions{ServerMetricsProvider: orcaload.Provider(lim.Limiter)}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	for range held {
		v := lim.Begin(context.Background(), engine.Call{Method: "/held.Service/Held", Header: keyfunc.HTTPHeader(nil)})
		if err := v.Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.End(nil, nil) })
	}
	t.Cleanup(func() {
		srv.Stop()
		_ = lim.Close(context.Background())
	})
	return lis.Addr().String(), lim.Limiter
}

// A client balancing with weighted_round_robin between a replica near its
// limit (6 of 8 seats taken) and an idle one sends most of its calls to
// the idle one, from the reports alone.
func TestBalancerSteersAwayFromALoadedReplica(t *testing.T) {
	busy, _ := replica(t, 6)
	idle, _ := replica(t, 0)
	r := manual.NewBuilderWithScheme("tollgate")
	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
		{Addresses: []resolver.Address{{Addr: busy}}}, {Addresses: []resolver.Address{{Addr: idle}}},
	}})
	cc, err := grpc.NewClient(r.Scheme()+":///replicas", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"weighted_round_robin": {"blackoutPeriod": "0s", "weightUpdatePeriod": "0.1s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := echo.NewClient(cc)
	count := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			var p peer.Peer
			if _, err := c.Say(t.Context(), wrapperspb.String("hi"), grpc.Peer(&p)); err != nil {
				t.Fatal(err)
			}
			got[p.Addr.String()]++
		}
		return got
	}
	// Until both replicas have reported a rate (their first interval of
	// the limit), the balancer spreads the calls evenly.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := count(400)
		if got[idle] >= 3*got[busy] {
			t.Logf("calls of 400: idle %d, busy %d", got[idle], got[busy])
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls of the last 400: idle %d, busy %d: want the idle replica to get at least 3× the busy one's", got[idle], got[busy])
		}
	}
}

// Without overload control there is no load to report: every field is
// unset, and a balancer ignores the report.
func TestNoOverloadReportsNothing(t *testing.T) {
	st, err := store.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	l, err := engine.New(st, engine.Config{Rules: []engine.Rule{{Name: "r", Key: keyfunc.Method(), Limits: engine.Fixed(tollgate.PerSecond(10))}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	sm := orcaload.Provider(l).ServerMetrics()
	if sm.AppUtilization != -1 || sm.QPS != -1 || sm.EPS != -1 || sm.CPUUtilization != -1 {
		t.Fatalf("ServerMetrics without overload control: %+v, want every field unset", sm)
	}
}
