package rls_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The edge never imports the gRPC glue: what rls shares with package
// interceptor lives in internal/storecall.
func TestNoInterceptorImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/tollgate/tollgate/rls").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/tollgate/tollgate/interceptor" {
			t.Fatalf("package rls imports %s", dep)
		}
	}
}
