package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkHTTP sends GET requests over loopback from 32 goroutines on
// random tenants to the same handler behind each HTTPMiddlewares subject:
// allocations, bytes and process CPU (client and server) per request.
func BenchmarkHTTP(b *testing.B) {
	for _, s := range HTTPMiddlewares() {
		b.Run(s.Name, func(b *testing.B) {
			opts := newClient(b).Options()
			mw, release, err := s.Wrap(opts, runPrefix("http"))
			if err != nil {
				b.Fatal(err)
			}
			defer release()
			url, stop, err := ServeLoopback(mw(SayHandler()))
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			c := HTTPClient(32)
			defer c.CloseIdleConnections()
			benchmarkLoopback(b, func(tenant string) error {
				req, _ := http.NewRequest("GET", url+"/say", nil)
				req.Header.Set(TenantHeader, tenant)
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			})
		})
	}
}

// BenchmarkConnect calls Echo's Say over connect-go's Connect protocol on
// loopback from 32 goroutines on random tenants, without and with
// connectlimit on the Memory store.
func BenchmarkConnect(b *testing.B) {
	for _, limited := range []bool{false, true} {
		b.Run(map[bool]string{false: "no-interceptor", true: "connectlimit"}[limited], func(b *testing.B) {
			path, h, release, err := ConnectSay(limited)
			if err != nil {
				b.Fatal(err)
			}
			defer release()
			url, stop, err := ServeLoopback(h)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			hc := HTTPClient(32)
			defer hc.CloseIdleConnections()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+path)
			benchmarkLoopback(b, func(tenant string) error {
				req := connect.NewRequest(wrapperspb.String("hello"))
				req.Header().Set(TenantHeader, tenant)
				_, err := client.CallUnary(context.Background(), req)
				return err
			})
		})
	}
}

// benchmarkLoopback runs call from 32 goroutines on random tenants and
// reports the process's CPU per call.
func benchmarkLoopback(b *testing.B, call func(tenant string) error) {
	tenants := make([]string, benchIdentities)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.SetParallelism(16) // 32 goroutines on 2 cores
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(tenants[rand.IntN(len(tenants))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
