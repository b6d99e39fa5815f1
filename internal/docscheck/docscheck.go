// Package docscheck checks the Markdown documentation against the module's
// source: every exported identifier it names as pkg.Name or pkg.Type.Member
// must exist, and every relative link must point at a file that exists. Its
// test runs it over README.md and docs/*.md, so documentation that names a
// renamed option fails the build instead of misleading a reader.
package docscheck

import (
	"fmt"
	"go/ast"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tollgate/tollgate/internal/gosrc"
)

// API is the exported surface of a module, by package name: the package's
// exported top-level names, and the exported fields and methods of each of
// its types.
type API struct {
	names   map[string]map[string]bool // package → top-level name
	members map[string]map[string]bool // "package.Type" → field or method
}

// Load parses the non-test Go files of the repository rooted at root (its
// module and the modules nested in it, skipping testdata and hidden
// directories) and returns their exported API. Packages named main are left out: nothing can name them.
func Load(root string) (*API, error) {
	api := &API{names: map[string]map[string]bool{}, members: map[string]map[string]bool{}}
	_, files, err := gosrc.Parse(root)
	for _, f := range files {
		if f.AST.Name.Name != "main" {
			api.add(f.AST.Name.Name, f.AST)
		}
	}
	return api, err
}

func (a *API) add(pkgName string, f *ast.File) {
	set := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
	}
	if a.names[pkgName] == nil {
		a.names[pkgName] = map[string]bool{}
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil {
				set(a.names, pkgName, decl.Name.Name)
			} else if recv := gosrc.TypeName(decl.Recv.List[0].Type); recv != "" {
				set(a.members, pkgName+"."+recv, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						set(a.names, pkgName, n.Name)
					}
				case *ast.TypeSpec:
					set(a.names, pkgName, spec.Name.Name)
					for _, m := range typeMembers(spec.Type) {
						set(a.members, pkgName+"."+spec.Name.Name, m)
					}
				}
			}
		}
	}
}

// typeMembers lists the fields of a struct type and the methods of an
// interface type, embedded ones by their type's name.
func typeMembers(e ast.Expr) []string {
	var list *ast.FieldList
	switch t := e.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var names []string
	for _, f := range list.List {
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		if len(f.Names) == 0 {
			names = append(names, gosrc.TypeName(f.Type))
		}
	}
	return names
}

// A Problem is one reference in the documentation that does not resolve.
type Problem struct {
	File string // as given to Check
	Line int    // 1-based
	Ref  string // the reference as written, or the link target
	Why  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Ref, p.Why) }

// ref matches pkg.Name and pkg.Name.Member where the package part is not
// itself the tail of a dotted or slashed name (tollgate.example.Echo names a
// proto service, github.com/x/y.Z an import path).
var ref = regexp.MustCompile(`(^|[^\w./-])([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// link matches a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Check reads the Markdown file at path and returns the references to this
// module's packages that name nothing, and the relative links whose target
// does not exist.
func (a *API) Check(path string) ([]Problem, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var problems []Problem
	for i, line := range strings.Split(string(text), "\n") {
		for _, m := range ref.FindAllStringSubmatch(line, -1) {
			pkg, name, member := m[2], m[3], m[4]
			names, ok := a.names[pkg]
			if !ok {
				continue // not one of this module's packages
			}
			r := pkg + "." + name
			switch {
			case !names[name]:
				problems = append(problems, Problem{path, i + 1, r, "no such exported name in package " + pkg})
			case member != "" && a.members[r] != nil && !a.members[r][member]:
				problems = append(problems, Problem{path, i + 1, r + "." + member, "no such field or method"})
			}
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				problems = append(problems, Problem{path, i + 1, m[1], "link to a missing file"})
			}
		}
	}
	return problems, nil
}
