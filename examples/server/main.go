// Command server runs an echo gRPC server rate-limited per tenant by
// tollgate, to try the limiter by hand or under the example client:
//
//	go run ./examples/server                      # in-process store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/server
//	REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001 go run ./examples/server
//
// Every Echo method is limited per value of the x-tenant header (see -h for
// the limit, algorithm and fail mode flags); the gRPC health service is not
// limited. SIGINT or SIGTERM stops it gracefully. The server itself is
// package exampleserver.
package main

import (
	"context"
	"io"
	"os"

	"github.com/tollgate/tollgate/examples/server/exampleserver"
	"github.com/tollgate/tollgate/internal/cmdmain"
)

func main() {
	cmdmain.Run("server", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv) })
}

// run parses args and the environment, then serves until ctx is done. The
// log goes to stdout, usage and flag errors to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	cfg, err := exampleserver.ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	return exampleserver.Run(ctx, cfg, stdout)
}
