// Package gosrc parses the non-test Go files of the repository (the core
// module and the modules nested in it), for the checks that read the
// project's own source (its documentation check and its API baseline).
package gosrc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File is one parsed Go file, the directory it is in, relative to the
// repository root with forward slashes ("." for the root), the import path
// of its package (its module's path and the directory's place in that
// module), and whether it is a _test.go file.
type File struct {
	Dir  string
	Path string
	AST  *ast.File
	Test bool
}

// Parse parses the non-test Go files of the repository rooted at root (a
// directory holding a go.mod) and of the modules nested in it, skipping
// testdata, hidden and underscore directories, in lexical order.
func Parse(root string) (*token.FileSet, []File, error) {
	return parse(root, false)
}

// ParseWithTests is Parse with the _test.go files too.
func ParseWithTests(root string) (*token.FileSet, []File, error) {
	return parse(root, true)
}

func parse(root string, tests bool) (*token.FileSet, []File, error) {
	root = filepath.Clean(root)
	fset := token.NewFileSet()
	var out []File
	modules := map[string]string{} // directory holding a go.mod → module path
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != root {
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
		}
		if data, err := os.ReadFile(filepath.Join(path, "go.mod")); err == nil {
			mod := modulePath(data)
			if mod == "" {
				return fmt.Errorf("%s: no module directive", filepath.Join(path, "go.mod"))
			}
			modules[path] = mod
		} else if path == root {
			return err
		}
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		importPath := packagePath(modules, path)
		for _, file := range files {
			test := strings.HasSuffix(file, "_test.go")
			if test && !tests {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			out = append(out, File{Dir: filepath.ToSlash(rel), Path: importPath, AST: f, Test: test})
		}
		return nil
	})
	return fset, out, err
}

// modulePath returns the path of a go.mod's module directive, "" if it has
// none.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// packagePath returns the import path of the package in dir: the path of
// the innermost module holding dir and dir's place under that module's
// directory.
func packagePath(modules map[string]string, dir string) string {
	var under []string
	for d := dir; ; d = filepath.Dir(d) {
		if mod, ok := modules[d]; ok {
			return path.Join(append([]string{mod}, under...)...)
		}
		if filepath.Dir(d) == d {
			return "" // not reached: the root holds a go.mod
		}
		under = append([]string{filepath.Base(d)}, under...)
	}
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
