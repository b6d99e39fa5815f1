// Package cmdmain runs the body of the module's example commands: under a
// context that ends at SIGINT or SIGTERM, with -help no error, and any other
// error printed after the command's name with exit status 1.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Run runs body under a context that ends at SIGINT or SIGTERM. When body
// fails with an error other than flag.ErrHelp, Run prints "name: error" to
// stderr and exits with status 1.
func Run(name string, body func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := body(ctx); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, name+":", err)
		stop()
		os.Exit(1)
	}
}
