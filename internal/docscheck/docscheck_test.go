package docscheck_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tollgate/tollgate/internal/docscheck"
)

const root = "../.."

// foreign are names the documentation quotes from other projects' code,
// which look like this repository's: Redis's C functions in a CPU profile
// (performance.md), a Kubernetes HorizontalPodAutoscaler's fields
// (deployment.md), net/http's Request fields (http.md).
var foreign = []string{"dictFind", "dictSdsKeyCompare", "minReplicas", "maxReplicas", "Request.Pattern", "Request.RemoteAddr"}

// TestDocs fails when README.md or a page of docs/ names an identifier of
// the module that does not exist, exported or not, or a source file or a
// link target that is missing; and when CHANGELOG.md names an exported
// identifier that does not exist.
func TestDocs(t *testing.T) {
	api, err := docscheck.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	api.Ignore(foreign...)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	for _, f := range files {
		if _, err := os.Stat(f); os.IsNotExist(err) && filepath.Base(f) == "CHANGELOG.md" {
			continue
		}
		check := api.Check
		if filepath.Base(f) == "CHANGELOG.md" {
			check = api.CheckHistory
		}
		problems, err := check(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// TestCheckFindsWhatIsWrong runs the checker on a page written to fail, so
// TestDocs cannot pass by finding nothing.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	api, err := docscheck.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "page.md")
	text := "Use `store.WithMemoryMaxReplays(2)` and `store.WithMaxReplays(2)`.\n" +
		"`interceptor.Rule.Name` and `interceptor.Rule.Nom`, `tollgate.Limit.Validate`.\n" +
		"Not ours: `redis.NewClient`, `tollgate.example.Echo`, `github.com/tollgate/tollgate.Nothing`, `tollgate.store.duration`.\n" +
		"[here](missing.md) and [there](https://example.com/x.md) and [self](page.md#top)\n" +
		"`store/admit_redis.go` `decodeAdmit`, `readAdmit`, `Redis.AllowAllWithSeat` and `Redis.allowAllWithSeat`, `Limiter.decide`.\n" +
		"`store/nowhere.go` `lua/gcra.lua` `gcra.lua` `EVALSHA` `engine/rule.go` `compileRule` `compileRules` `INVALID_ARGUMENT`.\n" +
		"`store.decodeAdmit` and `store.readAdmit`, `check.prepareSeat`, `TestDocs` and `TestDocz`, `dictFind`.\n" +
		"```\n`readAdmit` in a fenced block\n```\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	api.Ignore("dictFind")
	problems, err := api.Check(page)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Ref)
	}
	want := []string{"store.WithMemoryMaxReplays", "interceptor.Rule.Nom", "missing.md",
		"readAdmit", "Redis.allowAllWithSeat", "store/nowhere.go", "compileRules", "store.readAdmit", "TestDocz"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %q, want %q:\n%v", got, want, problems)
	}
}
