package exampleserver_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/internal/redistest"
)

// One Limiter, one store, one rule, four front doors: 10 calls of one
// tenant through gRPC (grpc-go), 10 through Connect and 10 through gRPC-Web
// (connect-go's client) and 10 plain HTTP requests (net/http's client), all
// at once, against a limit of 25: exactly 25 are admitted, on Memory, on
// Redis and on a Redis Cluster.
func TestOneQuotaThroughFourDoors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"memory", func(*testing.T) map[string]string { return nil }},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{exampleserver.EnvRedisURL: "redis://" + redistest.Single(t).Addr()}
		}},
		{"cluster", func(t *testing.T) map[string]string {
			return map[string]string{exampleserver.EnvRedisClusterAddrs: strings.Join(redistest.SharedCluster(t).Addrs, ",")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			cfg := parse(t, func(k string) string { return env[k] }, "-rate", "25", "-period", "1h", "-fail-mode", "closed", "-store-timeout", "10s")
			s := start(t, cfg)
			tenant := redistest.KeyPrefix(t) + "tenant"
			ctx := t.Context()
			gc := echo.NewClient(dial(t, s.Addr))
			hc := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(hc.CloseIdleConnections)
			connectSay := func(opts ...connect.ClientOption) func() error {
				c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, "http://"+s.HTTPAddr+echo.SayMethod, opts...)
				return func() error {
					req := connect.NewRequest(wrapperspb.String("hi"))
					req.Header().Set("x-tenant", tenant)
					_, err := c.CallUnary(ctx, req)
					return err
				}
			}
			doors := map[string]func() error{
				"grpc":    func() error { _, err := say(ctx, gc, tenant); return err },
				"connect": connectSay(),
				"grpcweb": connectSay(connect.WithGRPCWeb()),
				"http": func() error {
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.HTTPAddr+"/v1/say/hi", nil)
					req.Header.Set("X-Tenant", tenant)
					resp, err := hc.Do(req)
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					body, _ := io.ReadAll(resp.Body)
					switch {
					case resp.StatusCode == http.StatusOK && string(body) == "hi":
						return nil
					case resp.StatusCode == http.StatusTooManyRequests:
						return status.Error(codes.ResourceExhausted, string(body))
					}
					return fmt.Errorf("%s %q", resp.Status, body)
				},
			}
			var (
				mu       sync.Mutex
				admitted = map[string]int{}
				refused  int
				wg       sync.WaitGroup
			)
			for name, call := range doors {
				wg.Go(func() {
					for range 10 {
						err := call()
						var ce *connect.Error
						mu.Lock()
						switch {
						case err == nil:
							admitted[name]++
						case status.Code(err) == codes.ResourceExhausted, errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted:
							refused++
						default:
							t.Errorf("%s: %v", name, err)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			total := 0
			for _, n := range admitted {
				total += n
			}
			if total != 25 || refused != 15 {
				t.Fatalf("admitted %d (%v) and refused %d of 40, want 25 and 15", total, admitted, refused)
			}
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(s.Log.String(), "warning") {
				t.Fatalf("log:\n%s", s.Log.String())
			}
		})
	}
}
