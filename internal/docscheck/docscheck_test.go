package docscheck_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tollgate/tollgate/internal/docscheck"
)

const root = "../.."

// TestDocs fails when README.md or a page of docs/ names an exported
// identifier of the module that does not exist, or links to a missing file.
func TestDocs(t *testing.T) {
	api, err := docscheck.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	for _, f := range files {
		if _, err := os.Stat(f); os.IsNotExist(err) && filepath.Base(f) == "CHANGELOG.md" {
			continue
		}
		problems, err := api.Check(f)
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
		"Not ours: `redis.NewClient`, `tollgate.example.Echo`, `github.com/tollgate/tollgate.Nothing`.\n" +
		"[here](missing.md) and [there](https://example.com/x.md) and [self](page.md#top)\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := api.Check(page)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Ref)
	}
	want := []string{"store.WithMemoryMaxReplays", "interceptor.Rule.Nom", "missing.md"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %q, want %q:\n%v", got, want, problems)
	}
}
