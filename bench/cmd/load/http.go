package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	golimiter "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// httpCallers is the concurrency of the HTTP and Connect cells.
const httpCallers = 32

// httpLimit is every HTTP subject's limit per tenant: 1000 a second, so
// that the random tenants of a cell are admitted and a cell measures what
// admitting costs.
var httpLimit = tollgate.Limit{Rate: 1000, Period: time.Second}

// httpSubject is one net/http server with some limiter in front of its
// handler: wrap returns the middleware and a function releasing what it
// holds.
type httpSubject struct {
	name      string
	reference bool
	wrap      func(m *measurer) (func(http.Handler) http.Handler, func(), error)
}

func tenantOf(r *http.Request) string { return r.Header.Get(bench.TenantHeader) }

func httpSubjects() []httpSubject {
	return []httpSubject{
		{name: "no limiter", reference: true, wrap: func(*measurer) (func(http.Handler) http.Handler, func(), error) {
			return func(h http.Handler) http.Handler { return h }, func() {}, nil
		}},
		{name: "tollgate httplimit, Memory store", wrap: func(*measurer) (func(http.Handler) http.Handler, func(), error) {
			st, err := store.NewMemory()
			if err != nil {
				return nil, nil, err
			}
			return tollgateHTTP(st, func() {})
		}},
		tollgateRedisHTTP("tollgate httplimit, Redis store"),
		{name: "go-limiter httplimit, memory store", wrap: func(*measurer) (func(http.Handler) http.Handler, func(), error) {
			st, err := memorystore.New(&memorystore.Config{Tokens: uint64(httpLimit.Rate), Interval: httpLimit.Period})
			if err != nil {
				return nil, nil, err
			}
			mw, err := golimiter.NewMiddleware(st, func(r *http.Request) (string, error) { return tenantOf(r), nil })
			if err != nil {
				return nil, nil, err
			}
			return mw.Handle, func() { _ = st.Close(context.Background()) }, nil
		}},
		{name: "ulule/limiter, memory store", wrap: func(*measurer) (func(http.Handler) http.Handler, func(), error) {
			l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: httpLimit.Period, Limit: httpLimit.Rate})
			return stdlib.NewMiddleware(l, stdlib.WithKeyGetter(tenantOf)).Handler, func() {}, nil
		}},
		{name: "ulule/limiter, Redis store", wrap: func(m *measurer) (func(http.Handler) http.Handler, func(), error) {
			c := redis.NewClient(cloneOptions(m.opts))
			st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: prefix(), MaxRetry: 3})
			if err != nil {
				_ = c.Close()
				return nil, nil, err
			}
			l := ulule.New(st, ulule.Rate{Period: httpLimit.Period, Limit: httpLimit.Rate})
			return stdlib.NewMiddleware(l, stdlib.WithKeyGetter(tenantOf)).Handler, func() { _ = c.Close() }, nil
		}},
	}
}

// tollgateRedisHTTP is httplimit's middleware over a Limiter on the Redis
// store, with opts.
func tollgateRedisHTTP(name string, opts ...store.RedisOption) httpSubject {
	return httpSubject{name: name, wrap: func(m *measurer) (func(http.Handler) http.Handler, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		st, err := redisStore(c, append([]store.RedisOption{store.WithPrefix(prefix()), store.WithDenyCache(store.DefaultDenyCacheSize)}, opts...)...)
		if err != nil {
			return nil, nil, err // redisStore closed c
		}
		return tollgateHTTP(st, func() { _ = c.Close() })
	}}
}

// httpVariants are the rows -variants adds: the Redis store with one
// round trip in flight instead of DefaultMaxPipelines, and unbatched.
func httpVariants() []httpSubject {
	return []httpSubject{
		tollgateRedisHTTP("tollgate httplimit, Redis store, one pipeline", store.WithBatching(store.DefaultBatchSize, 1)),
		tollgateRedisHTTP("tollgate httplimit, Redis store, unbatched", store.WithBatching(0, 0)),
	}
}

// tollgateHTTP is httplimit's middleware over a Limiter on st limiting
// per tenant header.
func tollgateHTTP(st tollgate.Store, release func()) (func(http.Handler) http.Handler, func(), error) {
	lim, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
		Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limits: interceptor.Fixed(httpLimit),
	}))
	if err != nil {
		release()
		return nil, nil, err
	}
	mw, err := httplimit.New(lim)
	if err != nil {
		release()
		return nil, nil, err
	}
	return mw, func() { _ = lim.Close(context.Background()); release() }, nil
}

// serveLoopback serves h on a new loopback port with HTTP/1.1 and
// unencrypted HTTP/2, and returns its URL and a function stopping it.
func serveLoopback(h http.Handler) (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	return "http://" + lis.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}

// httpClient is a client keeping a connection per caller.
func httpClient(callers int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: callers, MaxIdleConnsPerHost: callers}}
}

// httpCell serves a handler answering "hi" behind s's middleware and
// sends GET requests from callers goroutines for m.cfg.d, each with a
// random tenant in its header.
func (m *measurer) httpCell(ctx context.Context, s httpSubject, tenants []string, callers int) (*sample, error) {
	mw, release, err := s.wrap(m)
	if err != nil {
		return nil, err
	}
	defer release()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /say", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") })
	url, stop, err := serveLoopback(mw(mux))
	if err != nil {
		return nil, err
	}
	defer stop()
	c := httpClient(callers)
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
	servers := httpSubjects()
	if m.cfg.variants {
		servers = append(servers, httpVariants()...)
	}
	subjects := make([]subject, len(servers))
	for i, s := range servers {
		subjects[i] = subject{name: s.name, reference: s.reference}
	}
	rows, err := m.compare(ctx, "http", "random", httpCallers, m.filter(subjects), func(s subject) (*sample, error) {
		for _, srv := range servers {
			if srv.name == s.name {
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

type msg = wrapperspb.StringValue

// connectCell serves Echo's Say over connect-go, behind connectlimit on
// the Memory store unless reference, and calls it over the Connect
// protocol from callers goroutines for m.cfg.d, each call with a random
// tenant.
func (m *measurer) connectCell(ctx context.Context, limited bool, tenants []string, callers int) (*sample, error) {
	var opts []connect.HandlerOption
	if limited {
		st, err := store.NewMemory()
		if err != nil {
			return nil, err
		}
		lim, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
			Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limits: interceptor.Fixed(httpLimit),
		}))
		if err != nil {
			return nil, err
		}
		defer lim.Close(context.Background())
		ic, err := connectlimit.New(lim)
		if err != nil {
			return nil, err
		}
		opts = append(opts, connect.WithInterceptors(ic))
	}
	const procedure = "/tollgate.example.Echo/Say"
	h := connect.NewUnaryHandler(procedure, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(req.Msg), nil
	}, opts...)
	url, stop, err := serveLoopback(h)
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := httpClient(callers)
	defer hc.CloseIdleConnections()
	client := connect.NewClient[msg, msg](hc, url+procedure)
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
