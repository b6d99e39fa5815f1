package telemetry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryNameIsDocumented: the names are public only in the
// documentation, so each one this package declares must appear there, in
// a code span, for a dashboard's author to find.
func TestEveryNameIsDocumented(t *testing.T) {
	var docs strings.Builder
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(paths, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		if _, ok := node.(*ast.ImportSpec); ok {
			return false
		}
		lit, ok := node.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if !strings.Contains(docs.String(), "`"+name+"`") && !strings.Contains(docs.String(), "`"+name+" ") &&
			!strings.Contains(docs.String(), "`"+name+"{") {
			t.Errorf("%s is recorded but named in no page of docs/ (in a code span)", name)
		}
		return true
	})
	if n < 40 {
		t.Fatalf("found %d names in telemetry.go: the test reads the wrong file", n)
	}
}
