package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/tollgate/tollgate/bench"
)

// rlsRoute is the route descriptor's key and value the rls section sends,
// as Envoy Gateway names a route's rule.
const rlsRoute = "httproute/default/api/rule/0/match/0"

// rlsSection measures Envoy's rate limit service as Envoy Gateway runs it:
// envoyproxy/ratelimit's server and tollgate-rls (built as the image builds
// it), each started with Envoy Gateway's environment alone, fed the same
// snapshot over xDS, called over mutual TLS by -callers concurrent callers
// (the largest number given) on 4 connections, one route descriptor of
// -identities users per call, every call admitted. Reps alternate the two
// servers; each gives calls/s and Redis CPU per call (INFO cpu); the ratios
// are taken within a rep, and the notes give medians and min–max, with
// the Redis commands per call (INFO commandstats, those scripts run
// included) and the script calls among them.
func (m *measurer) rlsSection(ctx context.Context) ([]string, error) {
	ref, err := bench.EnvoyRatelimitBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tollgate-load-rls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tollgate, err := bench.BuildTollgateRLS(dir)
	if err != nil {
		return nil, err
	}
	g, err := bench.NewGateway()
	if err != nil {
		return nil, err
	}
	defer g.Close()
	domain := "load" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := g.Push("v1", &rlsconf.RateLimitConfig{Name: "default/eg/load", Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: rlsRoute, Value: rlsRoute,
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1 << 31}}},
	}}}); err != nil {
		return nil, err
	}
	type subject struct {
		name    string
		clients []pb.RateLimitServiceClient
	}
	var subjects []subject
	for _, s := range []struct{ name, bin string }{{"envoyproxy/ratelimit", ref}, {"tollgate-rls", tollgate}} {
		srv, err := g.Start(s.bin, m.opts.Addr)
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		sub := subject{name: s.name}
		for range 4 {
			c, closeC, err := srv.Dial(true)
			if err != nil {
				return nil, err
			}
			defer closeC()
			sub.clients = append(sub.clients, c)
		}
		// Wait for the snapshot, and warm the connections and the scripts.
		if _, err := m.rlsDrive(ctx, sub.clients, domain, time.Second, 500*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		subjects = append(subjects, sub)
	}
	type result struct{ callsPerSec, redisUs, commands, scripts float64 }
	results := make([][]result, len(subjects))
	for rep := range m.cfg.reps {
		order := []int{0, 1}
		if rep%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			cpu0, err := bench.ServerCPU(ctx, m.admin)
			if err != nil {
				return nil, err
			}
			st0, err := bench.CommandStats(ctx, m.admin)
			if err != nil {
				return nil, err
			}
			n, err := m.rlsDrive(ctx, subjects[i].clients, domain, 0, m.cfg.d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", subjects[i].name, err)
			}
			cpu1, err := bench.ServerCPU(ctx, m.admin)
			if err != nil {
				return nil, err
			}
			st1, err := bench.CommandStats(ctx, m.admin)
			if err != nil {
				return nil, err
			}
			var cmds int64
			for name, c := range st1 {
				if name != "info" {
					cmds += c.Calls - st0[name].Calls
				}
			}
			calls := float64(max(n, 1))
			results[i] = append(results[i], result{float64(n) / m.cfg.d.Seconds(), float64((cpu1 - cpu0).Microseconds()) / calls,
				float64(cmds) / calls, float64(bench.ScriptCalls(st1).Calls-bench.ScriptCalls(st0).Calls) / calls})
		}
	}
	var rate, cpu []float64
	for r := range results[0] {
		rate = append(rate, results[1][r].callsPerSec/results[0][r].callsPerSec)
		cpu = append(cpu, results[1][r].redisUs/results[0][r].redisUs)
	}
	callers := slices.Max(m.cfg.callers)
	notes := []string{
		fmt.Sprintf("Envoy's rate limit service as Envoy Gateway runs it (its environment, xDS, mutual TLS), %d callers on 4 connections, %d users, one route descriptor per call, every call admitted; %d alternating reps of %s:", callers, m.cfg.identities, m.cfg.reps, m.cfg.d),
		"",
		"| server | calls/s, median (min – max) | Redis CPU per call, median (min – max) | Redis commands per call | of them scripts |",
		"| --- | --- | --- | --- | --- |",
	}
	for i, s := range subjects {
		var cs, us, cmds, scripts []float64
		for _, r := range results[i] {
			cs, us, cmds, scripts = append(cs, r.callsPerSec), append(us, r.redisUs), append(cmds, r.commands), append(scripts, r.scripts)
		}
		notes = append(notes, fmt.Sprintf("| %s | %.0f (%.0f – %.0f) | %.1f µs (%.1f – %.1f) | %.2f | %.2f |", s.name, median(cs), slices.Min(cs), slices.Max(cs), median(us), slices.Min(us), slices.Max(us), median(cmds), median(scripts)))
	}
	notes = append(notes, "",
		fmt.Sprintf("tollgate-rls / envoyproxy/ratelimit, rep by rep: calls/s %.2f× (%.2f – %.2f), Redis CPU per call %.2f× (%.2f – %.2f)",
			median(rate), slices.Min(rate), slices.Max(rate), median(cpu), slices.Min(cpu), slices.Max(cpu)))
	return notes, nil
}

// rlsDrive calls ShouldRateLimit from the largest -callers number of
// goroutines spread over clients for d and returns how many calls
// answered OK; an error or an OVER_LIMIT fails the run. ready, when not 0,
// first waits up to that long for a call to be answered with a limit.
func (m *measurer) rlsDrive(ctx context.Context, clients []pb.RateLimitServiceClient, domain string, ready, d time.Duration) (int64, error) {
	if ready > 0 {
		deadline := time.Now().Add(30 * ready)
		for {
			resp, err := clients[0].ShouldRateLimit(ctx, rlsRequest(domain, 0))
			if err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("the snapshot is not served: %v %v", resp, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	callers := slices.Max(m.cfg.callers)
	var calls atomic.Int64
	var failure atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			c := clients[i%len(clients)]
			for time.Now().Before(stop) {
				resp, err := c.ShouldRateLimit(ctx, rlsRequest(domain, rng.IntN(m.cfg.identities)))
				if err == nil && resp.GetOverallCode() != pb.RateLimitResponse_OK {
					err = fmt.Errorf("answered %s", resp.GetOverallCode())
				}
				if err != nil {
					failure.CompareAndSwap(nil, err)
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := failure.Load().(error); err != nil {
		return 0, err
	}
	return calls.Load(), nil
}

func rlsRequest(domain string, user int) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: rlsRoute, Value: rlsRoute}, {Key: "user", Value: "u" + strconv.Itoa(user)},
	}}}}
}
