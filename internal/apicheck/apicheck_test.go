package apicheck_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/apicheck"
)

const root = "../.."

var update = flag.Bool("update", false, "rewrite api/v1.txt from the source")

// TestAPIBaseline fails when the exported API differs from api/v1.txt. A
// change that is meant is recorded with
//
//	go test ./internal/apicheck -update
//
// and the diff of api/v1.txt shows it in review.
func TestAPIBaseline(t *testing.T) {
	lines, err := apicheck.Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	baseline := filepath.Join(root, "api", "v1.txt")
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.MkdirAll(filepath.Dir(baseline), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(baseline, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(baseline)
	if err != nil {
		t.Fatalf("%v: record the API with go test ./internal/apicheck -update", err)
	}
	want := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		want[l] = true
	}
	have := map[string]bool{}
	for _, l := range lines {
		have[l] = true
		if !want[l] {
			t.Errorf("added to the API, not in api/v1.txt: %s", l)
		}
	}
	for l := range want {
		if !have[l] {
			t.Errorf("removed from the API, still in api/v1.txt: %s", l)
		}
	}
	if t.Failed() {
		t.Log("if the change is meant, record it: go test ./internal/apicheck -update")
	}
}

// TestLinesFormat pins the format of a few known lines, so the baseline
// cannot silently become empty or lose signatures.
func TestLinesFormat(t *testing.T) {
	lines, err := apicheck.Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pkg github.com/tollgate/tollgate, func PerSecond(int64) Limit",
		"pkg github.com/tollgate/tollgate, type Limit struct, Rate int64",
		"pkg github.com/tollgate/tollgate, type Store interface, Allow(context.Context, Request) (Decision, error)",
		"pkg github.com/tollgate/tollgate, const TokenBucket Algorithm",
		"pkg github.com/tollgate/tollgate/keyfunc, type Func func(context.Context, Call) (string, error)",
	} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("missing line %q", want)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "/internal/") || strings.Contains(l, "/examples/") ||
			strings.Contains(l, "/cmd/") || strings.Contains(l, "/bench") {
			t.Errorf("non-public package listed: %s", l)
		}
	}
	// The packages of the nested modules are part of the API too.
	for _, pkg := range []string{"github.com/tollgate/tollgate/rls", "github.com/tollgate/tollgate/rlqs"} {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, "pkg "+pkg+", ")
		}
		if !found {
			t.Errorf("no line for package %s (a module of its own)", pkg)
		}
	}
}
