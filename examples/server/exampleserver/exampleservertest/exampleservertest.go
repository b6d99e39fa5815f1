// Package exampleservertest runs the example server in-process for tests:
// the server's own tests and the example client's start it the same way.
package exampleservertest

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/internal/grpctest"
)

// Parse returns the configuration the server's flags args and the
// environment getenv give (nil getenv: an empty environment), failing the
// test if they are invalid.
func Parse(t testing.TB, getenv func(string) string, args ...string) exampleserver.Config {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, err := exampleserver.ParseFlags(args, getenv, io.Discard)
	if err != nil {
		t.Fatalf("ParseFlags(%q): %v", args, err)
	}
	return cfg
}

// Server is one example server running in the test's process.
type Server struct {
	// Addr is the address the server listens on.
	Addr string
	// HTTPAddr is the address of its HTTP listener (Connect and HTTP), or
	// "" without one.
	HTTPAddr string
	// Log is what the server logged so far.
	Log *grpctest.Log

	stop func() error
}

// Start runs exampleserver.ServeListeners with cfg on lis, or on a new
// loopback port when lis is nil, and, when cfg.HTTPAddr is set, its HTTP
// listener on a new loopback port, until Stop or the end of the test,
// which fails if Serve returned an error.
func Start(t testing.TB, cfg exampleserver.Config, lis net.Listener) *Server {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	var httpLis net.Listener
	if cfg.HTTPAddr != "" {
		var err error
		if httpLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			lis.Close()
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: lis.Addr().String(), Log: &grpctest.Log{}}
	if httpLis != nil {
		s.HTTPAddr = httpLis.Addr().String()
	}
	done := make(chan error, 1)
	go func() { done <- exampleserver.ServeListeners(ctx, cfg, lis, httpLis, s.Log) }()
	var once sync.Once
	var result error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			result = <-done
		})
		return result
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// Stop stops the server gracefully, as SIGINT does, and returns what Serve
// returned. Later calls return the same.
func (s *Server) Stop() error { return s.stop() }
