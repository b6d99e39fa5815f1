package interceptor_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The interceptor depends on the tollgate.Store interface, never on package
// store: the Memory store FailLocal decides in is given (WithLocalStore).
func TestNoStoreImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/tollgate/tollgate/interceptor").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/tollgate/tollgate/store" {
			t.Fatalf("package interceptor imports %s", dep)
		}
	}
}
