package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// redisOptions is the Redis every test and benchmark of this package uses:
// REDIS_URL when set, otherwise a redis-server TestMain started.
var redisOptions *redis.Options

// TestMain starts redis-server (or uses REDIS_URL), runs the tests, stops
// the server and checks that no goroutine leaked. Without redis-server the
// run fails with a message saying what to install; it never skips.
func TestMain(m *testing.M) {
	var srv *Server
	if u := os.Getenv("REDIS_URL"); u != "" {
		o, err := redis.ParseURL(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "REDIS_URL: %v\n", err)
			os.Exit(1)
		}
		o.ContextTimeoutEnabled = true
		redisOptions = o
	} else {
		var err error
		if srv, err = StartRedis(); err != nil {
			fmt.Fprintf(os.Stderr, "bench tests need Redis: %v\n", err)
			os.Exit(1)
		}
		redisOptions = srv.Options()
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a client for the test Redis, closed when tb ends.
func newClient(tb testing.TB) *redis.Client {
	tb.Helper()
	o := *redisOptions
	c := redis.NewClient(&o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
