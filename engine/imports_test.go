package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine speaks no wire protocol: neither it nor the net/http door
// imports a gRPC or Connect package, even through their dependencies (an
// HTTP-only program links no gRPC); and the engine depends on the
// tollgate.Store interface, never on package store (FailLocal's Memory
// store is given, Config.LocalStore).
func TestImports(t *testing.T) {
	for pkg, banned := range map[string][]string{
		"github.com/tollgate/tollgate/engine":    {"google.golang.org/grpc", "connectrpc.com/", "github.com/tollgate/tollgate/store"},
		"github.com/tollgate/tollgate/httplimit": {"google.golang.org/grpc", "connectrpc.com/"},
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if dep == b || strings.HasPrefix(dep, b+"/") || strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b) {
					t.Errorf("%s imports %s", pkg, dep)
				}
			}
		}
	}
}
