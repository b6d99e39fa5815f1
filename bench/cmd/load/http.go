package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/store"
)

// httpCallers is the concurrency of the HTTP and Connect cells.
const httpCallers = 32

// httpVariants are the rows -variants adds: the Memory store without the
// RateLimit fields, and with the middleware on the route instead of around
// the mux; the Redis store with one round trip in flight instead of
// DefaultMaxPipelines, and unbatched.
func httpVariants() []bench.HTTPMiddleware {
	return []bench.HTTPMiddleware{
		bench.TollgateMemoryHTTP("tollgate httplimit, Memory store, no RateLimit fields", false, httplimit.WithoutRateLimitFields()),
		bench.TollgateMemoryHTTP("tollgate httplimit, Memory store, on the route", true),
		bench.TollgateRedisHTTP("tollgate httplimit, Redis store, one pipeline", store.WithBatching(128, 1)),
		bench.TollgateRedisHTTP("tollgate httplimit, Redis store, unbatched", store.WithBatching(0, 0)),
	}
}

// httpCell serves bench.SayHandler behind s's middleware over loopback
// and sends GET requests from callers goroutines for m.cfg.d, each with a
// random tenant in its header.
func (m *measurer) httpCell(ctx context.Context, s bench.HTTPMiddleware, tenants []string, callers int) (*sample, error) {
	mw, release, err := s.Wrap(cloneOptions(m.opts), prefix())
	if err != nil {
		return nil, err
	}
	defer release()
	url, stop, err := bench.ServeLoopback(mw(bench.SayHandler()))
	if err != nil {
		return nil, err
	}
	defer stop()
	c := bench.HTTPClient(callers)
	defer c.CloseIdleConnections()
	get := func(tenant string) error {
		req, err := http.NewRequestWithContext(ctx, "GET", url+"/say", nil)
		if err != nil {
			return err
		}
		req.Header.Set(bench.TenantHeader, tenant)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		return err
	}
	if err := get("warm-up"); err != nil {
		return nil, fmt.Errorf("warm-up request: %w", err)
	}
	return m.run(ctx, callers, func(r *rand.Rand) error { return get(tenants[r.IntN(len(tenants))]) })
}

func (m *measurer) httpSection(ctx context.Context) ([]row, error) {
	tenants := randomTenants(m.cfg.identities)
	servers := bench.HTTPMiddlewares()
	if m.cfg.variants {
		servers = append(servers, httpVariants()...)
	}
	subjects := make([]subject, len(servers))
	for i, s := range servers {
		subjects[i] = subject{name: s.Name, reference: s.Reference}
	}
	rows, err := m.compare(ctx, "http", "random", httpCallers, m.filter(subjects), func(s subject) (*sample, error) {
		for _, srv := range servers {
			if srv.Name == s.name {
				return m.httpCell(ctx, srv, tenants, httpCallers)
			}
		}
		return nil, fmt.Errorf("no subject %q", s.name)
	})
	fmt.Fprintln(os.Stderr, "load: http done")
	return rows, err
}

func randomTenants(n int) []string {
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	return tenants
}

// connectCell serves Echo's Say over connect-go, behind connectlimit on
// the Memory store when limited, and calls it over the Connect protocol
// from callers goroutines for m.cfg.d, each call with a random tenant.
func (m *measurer) connectCell(ctx context.Context, limited bool, tenants []string, callers int) (*sample, error) {
	path, h, release, err := bench.ConnectSay(limited)
	if err != nil {
		return nil, err
	}
	defer release()
	url, stop, err := bench.ServeLoopback(h)
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := bench.HTTPClient(callers)
	defer hc.CloseIdleConnections()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+path)
	call := func(tenant string) error {
		req := connect.NewRequest(wrapperspb.String("hello"))
		req.Header().Set(bench.TenantHeader, tenant)
		_, err := client.CallUnary(ctx, req)
		return err
	}
	if err := call("warm-up"); err != nil {
		return nil, fmt.Errorf("warm-up call: %w", err)
	}
	return m.run(ctx, callers, func(r *rand.Rand) error { return call(tenants[r.IntN(len(tenants))]) })
}

func (m *measurer) connectSection(ctx context.Context) ([]row, error) {
	tenants := randomTenants(m.cfg.identities)
	subjects := []subject{{name: "no interceptor", reference: true}, {name: "tollgate connectlimit, Memory store"}}
	rows, err := m.compare(ctx, "connect", "random", httpCallers, m.filter(subjects), func(s subject) (*sample, error) {
		return m.connectCell(ctx, !s.reference, tenants, httpCallers)
	})
	fmt.Fprintln(os.Stderr, "load: connect done")
	return rows, err
}
