package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command's logic as `go run ./examples/server -addr
// 127.0.0.1:0` would, on its embedded default store, makes a call, and stops
// it the way SIGINT does (by cancelling its context).
func TestRun(t *testing.T) {
	out := &grpctest.Log{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, out, io.Discard, func(string) string { return "" })
	}()

	listening := regexp.MustCompile(`listening on (\S+)`)
	var addr string
	redistest.Eventually(t, 30*time.Second, func() error {
		m := listening.FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("the server did not start:\n%s", out.String())
		}
		addr = m[1]
		return nil
	})

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var trailer metadata.MD
	got, err := echo.NewClient(cc).Say(metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "a"), wrapperspb.String("hello"), grpc.Trailer(&trailer))
	if err != nil || got.GetValue() != "hello" {
		t.Fatalf("Say: %v %v", got, err)
	}
	if len(trailer.Get("x-ratelimit-limit")) != 1 || trailer.Get("x-ratelimit-limit")[0] != "10" {
		t.Fatalf("trailer %v: want x-ratelimit-limit 10 (the default -rate)", trailer)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	log := out.String()
	for _, want := range []string{"store: in-process memory (set REDIS_URL, REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS for Redis)", "stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(t.Context(), []string{"-algorithm", "leaky"}, io.Discard, &stderr, func(string) string { return "" }); err == nil {
		t.Fatal("run accepted -algorithm leaky")
	}
	if err := run(t.Context(), []string{"-h"}, io.Discard, &stderr, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(stderr.String(), "-tenant-header") {
		t.Fatalf("usage lacks the flags:\n%s", stderr.String())
	}
}
