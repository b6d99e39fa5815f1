package bench

import (
	"context"
	"io"
	"net"
	"net/http"
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
	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// HTTPLimit is every HTTP and Connect subject's limit per tenant: 1000 a
// second, so that random tenants are admitted and a measurement is what
// admitting costs.
var HTTPLimit = tollgate.Limit{Rate: 1000, Period: time.Second}

// HTTPMiddleware is one net/http limiter the HTTP measurements compare,
// limiting per TenantHeader value: Wrap returns its middleware on a Redis
// reached with opts (keys under prefix), for those that use one, and a
// function releasing what it holds.
type HTTPMiddleware struct {
	Name string
	// Reference: the server without a limiter, the ratios' denominator.
	Reference bool
	Wrap      func(opts *redis.Options, prefix string) (func(http.Handler) http.Handler, func(), error)
}

func tenantOf(r *http.Request) string { return r.Header.Get(TenantHeader) }

// HTTPMiddlewares are the subjects of the HTTP comparison: no limiter,
// tollgate's httplimit on the Memory and the Redis store,
// sethvargo/go-limiter's httplimit on its memory store, ulule/limiter's
// net/http middleware on its memory and its Redis store.
func HTTPMiddlewares() []HTTPMiddleware {
	return []HTTPMiddleware{
		{Name: "no limiter", Reference: true, Wrap: func(*redis.Options, string) (func(http.Handler) http.Handler, func(), error) {
			return func(h http.Handler) http.Handler { return h }, func() {}, nil
		}},
		TollgateMemoryHTTP("tollgate httplimit, Memory store", false),
		TollgateRedisHTTP("tollgate httplimit, Redis store"),
		{Name: "go-limiter httplimit, memory store", Wrap: func(*redis.Options, string) (func(http.Handler) http.Handler, func(), error) {
			st, err := memorystore.New(&memorystore.Config{Tokens: uint64(HTTPLimit.Rate), Interval: HTTPLimit.Period})
			if err != nil {
				return nil, nil, err
			}
			mw, err := golimiter.NewMiddleware(st, func(r *http.Request) (string, error) { return tenantOf(r), nil })
			if err != nil {
				return nil, nil, err
			}
			return mw.Handle, func() { _ = st.Close(context.Background()) }, nil
		}},
		{Name: "ulule/limiter, memory store", Wrap: func(*redis.Options, string) (func(http.Handler) http.Handler, func(), error) {
			l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: HTTPLimit.Period, Limit: HTTPLimit.Rate})
			return stdlib.NewMiddleware(l, stdlib.WithKeyGetter(tenantOf)).Handler, func() {}, nil
		}},
		{Name: "ulule/limiter, Redis store", Wrap: func(opts *redis.Options, prefix string) (func(http.Handler) http.Handler, func(), error) {
			c := redis.NewClient(opts)
			st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: prefix, MaxRetry: 3})
			if err != nil {
				_ = c.Close()
				return nil, nil, err
			}
			l := ulule.New(st, ulule.Rate{Period: HTTPLimit.Period, Limit: HTTPLimit.Rate})
			return stdlib.NewMiddleware(l, stdlib.WithKeyGetter(tenantOf)).Handler, func() { _ = c.Close() }, nil
		}},
	}
}

// TollgateRedisHTTP is httplimit's middleware over a Limiter on the Redis
// store, with the deny cache and storeOpts.
func TollgateRedisHTTP(name string, storeOpts ...store.RedisOption) HTTPMiddleware {
	return HTTPMiddleware{Name: name, Wrap: func(opts *redis.Options, prefix string) (func(http.Handler) http.Handler, func(), error) {
		c := redis.NewClient(opts)
		st, err := store.NewRedis(c, append([]store.RedisOption{store.WithPrefix(prefix), store.WithDenyCache(4096)}, storeOpts...)...)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return tollgateHTTP(st, func() { _ = c.Close() })
	}}
}

// TollgateMemoryHTTP is httplimit's middleware, with opts, over a Limiter
// on the Memory store. onRoute puts it on SayHandler's one route
// (mux.Handle("GET /say", limit(handler))) instead of around the mux.
func TollgateMemoryHTTP(name string, onRoute bool, opts ...httplimit.Option) HTTPMiddleware {
	return HTTPMiddleware{Name: name, Wrap: func(*redis.Options, string) (func(http.Handler) http.Handler, func(), error) {
		st, err := store.NewMemory()
		if err != nil {
			return nil, nil, err
		}
		mw, release, err := tollgateHTTP(st, func() {}, opts...)
		if err != nil || !onRoute {
			return mw, release, err
		}
		return func(http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /say", mw(http.HandlerFunc(say)))
			return mux
		}, release, nil
	}}
}

// tollgateHTTP is httplimit's middleware, with opts, over a Limiter on st
// limiting per tenant.
func tollgateHTTP(st tollgate.Store, release func(), opts ...httplimit.Option) (func(http.Handler) http.Handler, func(), error) {
	lim, err := tenantLimiter(st)
	if err != nil {
		release()
		return nil, nil, err
	}
	mw, err := httplimit.New(lim, opts...)
	if err != nil {
		release()
		return nil, nil, err
	}
	return mw, func() { _ = lim.Close(context.Background()); release() }, nil
}

// tenantLimiter is a Limiter on st with one rule: HTTPLimit per tenant.
func tenantLimiter(st tollgate.Store) (*engine.Limiter, error) {
	return engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name: "per-tenant", Key: keyfunc.Metadata(TenantHeader), Limits: engine.Fixed(HTTPLimit),
	}}})
}

// SayHandler is the handler the HTTP measurements limit: GET /say
// answers "hi".
func SayHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /say", say)
	return mux
}

// say answers "hi".
func say(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") }

// ConnectSay is Echo's Say over connect-go: behind connectlimit on a
// Limiter on the Memory store when limited. release stops the Limiter.
func ConnectSay(limited bool) (path string, h http.Handler, release func(), err error) {
	release = func() {}
	var opts []connect.HandlerOption
	if limited {
		st, err := store.NewMemory()
		if err != nil {
			return "", nil, nil, err
		}
		lim, err := tenantLimiter(st)
		if err != nil {
			return "", nil, nil, err
		}
		ic, err := connectlimit.New(lim)
		if err != nil {
			return "", nil, nil, err
		}
		opts, release = append(opts, connect.WithInterceptors(ic)), func() { _ = lim.Close(context.Background()) }
	}
	type msg = wrapperspb.StringValue
	return echo.SayMethod, connect.NewUnaryHandler(echo.SayMethod, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(req.Msg), nil
	}, opts...), release, nil
}

// ServeLoopback serves h on a new loopback port with HTTP/1.1 and
// unencrypted HTTP/2, and returns its URL and a function stopping it.
func ServeLoopback(h http.Handler) (url string, stop func(), err error) {
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

// HTTPClient is a client keeping up to callers connections open.
func HTTPClient(callers int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: callers, MaxIdleConnsPerHost: callers}}
}
