// Package apicheck lists the exported API of the public packages of every
// module in the repository (the core module and the modules nested in it),
// one line per exported identifier, in the format of Go's own api/go1.*.txt
// files. Its test compares the list with the checked-in api/v1.txt, so that
// a change of the exported API is a decision written into the baseline, not
// an accident.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/printer"
	"go/token"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/internal/gosrc"
)

// public reports whether the package in dir (relative to the repository
// root) is part of the API: not internal, not a command, an example or the
// benchmarks, and not generated protocol code (whose contract is its .proto
// file).
func public(dir string) bool {
	for _, part := range strings.Split(dir, "/") {
		switch part {
		case "internal", "examples", "cmd", "bench":
			return false
		}
	}
	return dir != "admin/v1"
}

// Lines returns the exported API of the repository rooted at root, sorted,
// one identifier a line:
//
//	pkg github.com/tollgate/tollgate, func PerSecond(int64) Limit
//	pkg github.com/tollgate/tollgate, type Limit struct, Rate int64
//	pkg github.com/tollgate/tollgate/store, method (*Redis) Allow(context.Context, tollgate.Request) (tollgate.Decision, error)
func Lines(root string) ([]string, error) {
	fset, files, err := gosrc.Parse(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if f.AST.Name.Name == "main" || !public(f.Dir) {
			continue
		}
		l := lister{fset: fset, prefix: "pkg " + f.Path + ", "}
		l.file(f.AST)
		out = append(out, l.lines...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

type lister struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (l *lister) add(format string, args ...any) {
	l.lines = append(l.lines, l.prefix+fmt.Sprintf(format, args...))
}

func (l *lister) file(f *ast.File) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			l.fn(d)
		case *ast.GenDecl:
			l.gen(d)
		}
	}
}

func (l *lister) fn(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	sig := l.signature(d.Type)
	if d.Recv == nil {
		l.add("func %s%s", d.Name.Name, sig)
		return
	}
	recv := d.Recv.List[0].Type
	if name := gosrc.TypeName(recv); name == "" || !ast.IsExported(name) {
		return
	}
	l.add("method (%s) %s%s", l.expr(recv), d.Name.Name, sig)
}

func (l *lister) gen(d *ast.GenDecl) {
	var iotaType ast.Expr // the type a const group's later specs carry on
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.TypeSpec:
			l.typ(s)
		case *ast.ValueSpec:
			kind := "var"
			if d.Tok == token.CONST {
				kind = "const"
				if s.Type != nil || len(s.Values) > 0 {
					iotaType = s.Type
				}
			}
			t := s.Type
			if t == nil && d.Tok == token.CONST {
				t = iotaType
			}
			for _, n := range s.Names {
				if !n.IsExported() {
					continue
				}
				if t != nil {
					l.add("%s %s %s", kind, n.Name, l.expr(t))
				} else {
					l.add("%s %s", kind, n.Name)
				}
			}
		}
	}
}

func (l *lister) typ(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.Assign.IsValid() {
		l.add("type %s = %s", name, l.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		l.add("type %s struct", name)
		for _, f := range t.Fields.List {
			for _, n := range fieldNames(f) {
				if ast.IsExported(n) {
					l.add("type %s struct, %s %s", name, n, l.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		l.add("type %s interface", name)
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				l.add("type %s interface, embeds %s", name, l.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					l.add("type %s interface, %s%s", name, n.Name, l.signature(m.Type.(*ast.FuncType)))
				}
			}
		}
	default:
		l.add("type %s %s", name, l.expr(s.Type))
	}
}

// signature prints a function type without parameter names.
func (l *lister) signature(ft *ast.FuncType) string {
	params := l.types(ft.Params)
	res := l.types(ft.Results)
	sig := "(" + strings.Join(params, ", ") + ")"
	switch {
	case len(res) == 1:
		sig += " " + res[0]
	case len(res) > 1:
		sig += " (" + strings.Join(res, ", ") + ")"
	}
	return sig
}

func (l *lister) types(fl *ast.FieldList) []string {
	if fl == nil {
		return nil
	}
	var out []string
	for _, f := range fl.List {
		n := max(len(f.Names), 1)
		for range n {
			out = append(out, l.expr(f.Type))
		}
	}
	return out
}

func (l *lister) expr(e ast.Expr) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, l.fset, stripNames(e)); err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// stripNames drops the parameter names of function types inside e, so that
// a renamed parameter is not an API change.
func stripNames(e ast.Expr) ast.Expr {
	ft, ok := e.(*ast.FuncType)
	if !ok {
		return e
	}
	strip := func(fl *ast.FieldList) *ast.FieldList {
		if fl == nil {
			return nil
		}
		out := &ast.FieldList{}
		for _, f := range fl.List {
			for range max(len(f.Names), 1) {
				out.List = append(out.List, &ast.Field{Type: stripNames(f.Type)})
			}
		}
		return out
	}
	return &ast.FuncType{TypeParams: ft.TypeParams, Params: strip(ft.Params), Results: strip(ft.Results)}
}

func fieldNames(f *ast.Field) []string {
	if len(f.Names) == 0 { // embedded
		return []string{gosrc.TypeName(f.Type)}
	}
	var out []string
	for _, n := range f.Names {
		out = append(out, n.Name)
	}
	return out
}
