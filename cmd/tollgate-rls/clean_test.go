package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// documentedBuild finds the go commands of README.md, docs/ and the
// Dockerfile that build or run this command: "go run ./cmd/tollgate-rls",
// "go build ./cmd/tollgate-rls", and the Dockerfile's build in this
// module alone.
var documentedBuild = regexp.MustCompile(`(?m)((?:[A-Z_]+=\S+\s+)*go (?:run|build)\b.*?(?:\./cmd/tollgate-rls|\s\.)(?:\s|$))`)

// TestDocumentedCommandsLeaveTheTreeClean builds the command as every page
// says to, each build with -mod=readonly (a checksum missing from go.sum or
// go.work.sum is then an error instead of a line written), and then finds
// the module files as committed: a documented command never dirties the
// tree.
func TestDocumentedCommandsLeaveTheTreeClean(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "cmd", "tollgate-rls", "Dockerfile"))
	type build struct{ page, dir string }
	var builds []build
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "tollgate-rls") && !strings.Contains(line, "GOWORK=off go build") {
				continue
			}
			if m := documentedBuild.FindStringSubmatch(line); m != nil {
				dir := root
				if strings.HasSuffix(strings.TrimSpace(m[1]), " .") || strings.Contains(m[1], "GOWORK=off") {
					dir = filepath.Join(root, "cmd", "tollgate-rls")
				}
				builds = append(builds, build{p, dir})
			}
		}
	}
	if len(builds) < 3 {
		t.Fatalf("found %d documented builds of tollgate-rls, want the README's, docs/envoy.md's and the Dockerfile's", len(builds))
	}
	before := moduleFilesStatus(t, root)
	out := filepath.Join(t.TempDir(), "tollgate-rls")
	for _, b := range builds {
		args := []string{"build", "-mod=readonly", "-o", out, "./cmd/tollgate-rls"}
		env := os.Environ()
		if b.dir != root {
			args[len(args)-1] = "."
			env = append(env, "GOWORK=off", "CGO_ENABLED=0")
		}
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = b.dir, env
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: go %s in %s: %v\n%s", b.page, strings.Join(args, " "), b.dir, err, msg)
		}
	}
	if after := moduleFilesStatus(t, root); after != before {
		t.Fatalf("the documented builds changed the module files:\n%s", after)
	}
}

// moduleFilesStatus is git's status of every go.mod, go.sum and go.work*
// file of the repository.
func moduleFilesStatus(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("git", "status", "--porcelain", "--", "go.work", "go.work.sum", ":(glob)**/go.mod", ":(glob)**/go.sum")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git status: %v\n%s", err, out)
	}
	return string(out)
}
