// Package gosrc parses the non-test Go files of one module, for the checks
// that read the module's own source (its documentation check and its API
// baseline).
package gosrc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File is one parsed non-test Go file and the directory it is in, relative
// to the module root with forward slashes ("." for the root).
type File struct {
	Dir string
	AST *ast.File
}

// Parse parses the non-test Go files of the module rooted at root, skipping
// testdata, hidden and underscore directories and nested modules, in
// lexical order.
func Parse(root string) (*token.FileSet, []File, error) {
	fset := token.NewFileSet()
	var out []File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != root {
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			out = append(out, File{Dir: filepath.ToSlash(rel), AST: f})
		}
		return nil
	})
	return fset, out, err
}

// TypeName is the name of a type expression: T for T, *T, T[P] and pkg.T;
// "" for any other expression.
func TypeName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
