// Package protogen holds gen.sh, which regenerates the module's gRPC code
// from its .proto files at pinned tool versions; its test checks that the
// checked-in code is what the .proto files generate.
package protogen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates each package's code into a scratch
// copy and compares it with the checked-in files, so that a .proto changed
// without `go generate` fails here. It needs protoc and the Go module proxy
// (or a module cache holding the pinned plugins).
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatalf("protoc is needed to check the generated code (apt-get install -y protobuf-compiler): %v", err)
	}
	script, err := filepath.Abs("gen.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, registered, pkg, proto string }{
		{"../../admin/v1", "tollgate/admin/v1", "github.com/tollgate/tollgate/admin/v1", "admin.proto"},
		{"../../examples/echo", "tollgate/example", "github.com/tollgate/tollgate/examples/echo", "echo.proto"},
	} {
		scratch := t.TempDir()
		src, err := os.ReadFile(filepath.Join(c.dir, c.proto))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, c.proto), src, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", script, c.registered, c.pkg, c.proto)
		cmd.Dir = scratch
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.proto, err, out)
		}
		base := c.proto[:len(c.proto)-len(".proto")]
		for _, name := range []string{base + ".pb.go", base + "_grpc.pb.go"} {
			want, err := os.ReadFile(filepath.Join(scratch, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(c.dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what %s generates: run go generate in %s", name, c.proto, c.dir)
			}
		}
	}
}
