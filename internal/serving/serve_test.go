package serving

import (
	"context"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// A server told to stop as it starts (its context done before its Serve
// could begin) stops cleanly: Serve returns nil, not grpc's "the server has
// been stopped", and the listener is closed. 50 starts, each racing its own
// stop.
func TestServeStoppedAsItStarts(t *testing.T) {
	logger := log.New(io.Discard, "", 0)
	for i := range 50 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := Serve(ctx, grpc.NewServer(), health.NewServer(), lis, time.Second, logger, nil, nil); err != nil {
			t.Fatalf("start %d, stopped at once: %v, want nil", i, err)
		}
		if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
			_ = c.Close()
			t.Fatalf("start %d: the listener still accepts after the stop", i)
		}
	}
}
