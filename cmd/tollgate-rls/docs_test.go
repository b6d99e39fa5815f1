package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/grpctest"
)

// docsAddr is where docs/envoy.md starts tollgate-rls for its grpcurl
// commands.
const docsAddr = "127.0.0.1:8081"

// TestDocsGrpcurlCommands runs every grpcurl command of docs/ addressed to
// tollgate-rls, exactly as written, against the command started as
// docs/envoy.md starts it (the example configuration, the in-process
// store), and compares what each prints with what the page shows.
func TestDocsGrpcurlCommands(t *testing.T) {
	grpcurl := grpctest.Grpcurl(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []grpctest.DocCommand
	for _, c := range grpctest.GrpcurlCommands(t, pages...) {
		if strings.Contains(c.Text, docsAddr) {
			cmds = append(cmds, c)
		}
	}
	if len(cmds) < 2 {
		t.Fatalf("found %d grpcurl commands for %s in docs/, want at least 2", len(cmds), docsAddr)
	}
	// go run ./cmd/tollgate-rls -config examples/rls/config -addr 127.0.0.1:8081
	startCommand(t, nil, "-config", filepath.Join(root, "examples", "rls", "config"), "-addr", docsAddr)
	for _, c := range cmds {
		sh := exec.Command("sh", "-c", c.Text)
		sh.Dir = root
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %s\nfailed: %v\n%s", c.Page, c.Text, err, out)
			continue
		}
		if c.Output == "" {
			t.Errorf("%s: %s\nthe page shows no answer after it", c.Page, c.Text)
			continue
		}
		var got, want any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Errorf("%s: %s\nprinted what is not JSON: %v\n%s", c.Page, c.Text, err, out)
			continue
		}
		if err := json.Unmarshal([]byte(c.Output), &want); err != nil {
			t.Errorf("%s: the answer shown after %s\nis not JSON: %v", c.Page, c.Text, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s\nprinted:\n%s\nthe page shows:\n%s", c.Page, c.Text, out, c.Output)
		}
	}
}
