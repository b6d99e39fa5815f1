// Package docscheck checks the Markdown documentation against the module's
// source: every identifier it names must exist, exported or not, and every
// relative link and every source file it names must point at a file that
// exists. Its test runs it over README.md and docs/*.md, so documentation
// that names a renamed option or function fails the build instead of
// misleading a reader.
//
// What counts as a name of the code:
//   - pkg.Name and pkg.Name.Member anywhere in the text, where pkg is one of
//     the module's packages and Name is exported (the API a user reads);
//   - in a code span (`…`): pkg.name and pkg.Name.member of any case,
//     Type.member where Type is a type declared in the module (its fields
//     and methods, and those of the types it embeds), a lowerCamelCase name
//     (declared somewhere in the module: a function, method, field, type,
//     constant or variable, or a function of the Lua scripts), a test,
//     benchmark, fuzz target or example by its name, and a path ending in
//     .go or .lua (relative to the repository root, or a file's name);
//   - in a code span on a line that names a .go file, any other identifier
//     (`identity`, `acquire`): a line that says where code is names code.
//
// Fenced code blocks are not checked: they show programs and output, whose
// names are the reader's own or other projects'.
package docscheck

import (
	"fmt"
	"go/ast"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tollgate/tollgate/internal/gosrc"
)

// API is what a module declares, by package name: the package's top-level
// names, and the fields and methods of each of its types; and every name
// declared anywhere, for the names the documentation gives without their
// package.
type API struct {
	root    string
	names   map[string]map[string]bool // package → top-level name
	members map[string]map[string]bool // "package.Type" → field or method
	// byType is every type name → its fields and methods (and the names of
	// the types it embeds), over every package.
	byType map[string]map[string]bool
	// declared is every name declared in the repository: top-level, field,
	// method, in test files and main packages too, and the Lua scripts'
	// functions.
	declared map[string]bool
	// files is the slash path of every file of the repository, relative
	// to its root, and every suffix of it after a slash: a path the
	// documentation gives resolves when it is one of them.
	files   map[string]bool
	ignored map[string]bool // Ignore
	// aliases maps "package.Name" of a type alias to the "package.Name"
	// of the type it names, when that is another package's type.
	aliases map[string]string
}

// Load parses the Go files of the repository rooted at root (its module and
// the modules nested in it, skipping testdata and hidden directories) and
// its Lua scripts, and returns what they declare. Packages named main are
// left out of the package names: nothing can import them.
func Load(root string) (*API, error) {
	api := &API{
		root:     root,
		names:    map[string]map[string]bool{},
		members:  map[string]map[string]bool{},
		byType:   map[string]map[string]bool{},
		declared: map[string]bool{},
		files:    map[string]bool{},
		ignored:  map[string]bool{},
		aliases:  map[string]string{},
	}
	_, files, err := gosrc.ParseWithTests(root)
	for _, f := range files {
		api.add(f.AST.Name.Name, f.AST, !f.Test && f.AST.Name.Name != "main")
	}
	if err != nil {
		return api, err
	}
	if err := api.addFiles(); err != nil {
		return api, err
	}
	return api, api.addLua(filepath.Join(root, "lua"))
}

// addFiles records the path of every file of the repository, and each
// suffix of it after a slash (lua/gcra.lua is also gcra.lua, the proto
// import path tollgate/example/echo.proto a suffix of its file's).
func (a *API) addFiles() error {
	return filepath.WalkDir(a.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != a.root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(a.root, path)
		if err != nil {
			return err
		}
		for rel = filepath.ToSlash(rel); ; {
			a.files[rel] = true
			_, after, ok := strings.Cut(rel, "/")
			if !ok {
				return nil
			}
			rel = after
		}
	})
}

func (a *API) add(pkgName string, f *ast.File, public bool) {
	set := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
	}
	if public && a.names[pkgName] == nil {
		a.names[pkgName] = map[string]bool{}
	}
	a.declared[pkgName] = true // a package's name names it
	name := func(n string) {
		a.declared[n] = true
		if public {
			set(a.names, pkgName, n)
		}
	}
	member := func(typ, m string) {
		a.declared[m] = true
		set(a.byType, typ, m)
		if public {
			set(a.members, pkgName+"."+typ, m)
		}
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil {
				name(decl.Name.Name)
			} else if recv := gosrc.TypeName(decl.Recv.List[0].Type); recv != "" {
				member(recv, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						name(n.Name)
					}
				case *ast.TypeSpec:
					name(spec.Name.Name)
					if sel, ok := spec.Type.(*ast.SelectorExpr); ok && spec.Assign.IsValid() && public {
						if pkg, ok := sel.X.(*ast.Ident); ok {
							a.aliases[pkgName+"."+spec.Name.Name] = pkg.Name + "." + sel.Sel.Name
						}
					}
					if a.byType[spec.Name.Name] == nil {
						a.byType[spec.Name.Name] = map[string]bool{}
					}
					for _, m := range typeMembers(spec.Type) {
						member(spec.Name.Name, m)
					}
				}
			}
		}
	}
}

// luaFunc matches the declaration of a Lua function.
var luaFunc = regexp.MustCompile(`(?m)^\s*(?:local\s+)?function\s+([A-Za-z_]\w*)`)

// addLua declares the functions of the Lua scripts in dir.
func (a *API) addLua(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil {
		return err
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, m := range luaFunc.FindAllStringSubmatch(string(text), -1) {
			a.declared[m[1]] = true
		}
	}
	return nil
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

// hasMember reports whether a type named typ, in any package, has member,
// itself or through a type it embeds.
func (a *API) hasMember(typ, member string, seen map[string]bool) bool {
	ms := a.byType[typ]
	if ms[member] {
		return true
	}
	if seen[typ] {
		return false
	}
	seen[typ] = true
	for m := range ms {
		if a.byType[m] != nil && a.hasMember(m, member, seen) {
			return true
		}
	}
	return false
}

// hasExported reports whether the exported type pkgType ("package.Type")
// has member, itself, through the type it is an alias of, or through a
// type it embeds; true when pkgType is not a type with members.
func (a *API) hasExported(pkgType, member string) bool {
	for range 8 { // an alias of an alias, but never a loop
		target, ok := a.aliases[pkgType]
		if !ok {
			break
		}
		pkgType = target
	}
	ms := a.members[pkgType]
	if ms == nil || ms[member] {
		return true
	}
	_, typ, _ := strings.Cut(pkgType, ".")
	return a.hasMember(typ, member, map[string]bool{})
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

var (
	// span matches a code span's text.
	span = regexp.MustCompile("`([^`]+)`")
	// dotted matches a name in a code span: one to three identifiers
	// joined by dots, perhaps called with no argument.
	dotted = regexp.MustCompile(`^([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\.([A-Za-z_]\w*))?(?:\(\))?$`)
	// sourcePath matches the path of a source file of the repository.
	sourcePath = regexp.MustCompile(`^[\w.-]+(?:/[\w.-]+)*\.(?:go|lua)$`)
	// lowerCamel and testName are names a code span gives without a
	// package that are the code's and no other's.
	lowerCamel = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z]\w*$`)
	testName   = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz|Example)[A-Z_]\w*$`)
	// allCaps is a Redis command or a gRPC code, never a Go name here.
	allCaps = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

// Check reads the Markdown file at path and returns the references to this
// module's code that name nothing, and the relative links and source paths
// whose target does not exist.
func (a *API) Check(path string) ([]Problem, error) { return a.check(path, true) }

// CheckHistory is Check without the code spans, for a changelog: it names
// what was removed or renamed, in code spans, and only its pkg.Name
// references and links must resolve.
func (a *API) CheckHistory(path string) ([]Problem, error) { return a.check(path, false) }

func (a *API) check(path string, spans bool) ([]Problem, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var problems []Problem
	fenced := false
	for i, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		report := func(ref, why string) { problems = append(problems, Problem{path, i + 1, ref, why}) }
		for _, m := range ref.FindAllStringSubmatch(line, -1) {
			pkg, name, member := m[2], m[3], m[4]
			names, ok := a.names[pkg]
			if !ok {
				continue // not one of this module's packages
			}
			r := pkg + "." + name
			switch {
			case !names[name]:
				report(r, "no such exported name in package "+pkg)
			case member != "" && !a.hasExported(r, member):
				report(r+"."+member, "no such field or method")
			}
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				report(m[1], "link to a missing file")
			}
		}
		if spans && !fenced {
			for _, p := range a.checkSpans(line) {
				report(p[0], p[1])
			}
		}
	}
	return problems, nil
}

// checkSpans checks the names and paths in the code spans of one line,
// and returns each that does not resolve with the reason.
func (a *API) checkSpans(line string) [][2]string {
	spans := span.FindAllStringSubmatch(line, -1)
	namesFile := false
	for _, s := range spans {
		namesFile = namesFile || strings.HasSuffix(s[1], ".go")
	}
	var problems [][2]string
	for _, s := range spans {
		code := s[1]
		if sourcePath.MatchString(code) {
			if !a.files[code] {
				problems = append(problems, [2]string{code, "no such file in the repository"})
			}
			continue
		}
		m := dotted.FindStringSubmatch(code)
		if m == nil {
			continue
		}
		if why := a.resolve(m[1], m[2], m[3], namesFile); why != "" {
			problems = append(problems, [2]string{strings.TrimSuffix(code, "()"), why})
		}
	}
	return problems
}

// resolve says why the name first[.second[.third]] of a code span names
// nothing in the module, or "" when it does or is not the module's to
// check. inFileLine: the line names a .go file.
func (a *API) resolve(first, second, third string, inFileLine bool) string {
	if a.ignored[first] || second != "" && a.ignored[first+"."+second] {
		return ""
	}
	if second != "" {
		isType := a.byType[first] != nil
		if isType && a.hasMember(first, second, map[string]bool{}) {
			return "" // Type.member (a type may share its name with a package)
		}
		names, isPkg := a.names[first]
		// pkg.Exported is ref's, in any text; pkg.unexported is checked
		// where it reads as Go (tollgate.store.duration is a metric).
		if isPkg && !ast.IsExported(second) && third == "" && (inFileLine || lowerCamel.MatchString(second)) {
			if !names[second] {
				return "no such name in package " + first
			}
			return ""
		}
		if isType && !isPkg {
			return "no such field or method of a type " + first
		}
		return "" // a variable, a proto message, another project's name
	}
	if testName.MatchString(first) || lowerCamel.MatchString(first) || inFileLine && !allCaps.MatchString(first) {
		if !a.declared[first] {
			return "declared nowhere in the repository"
		}
	}
	return ""
}

// Ignore makes Check accept names (a name, or a Type.member), which the documentation quotes from
// another project's code (a Redis function in a profile, say).
func (a *API) Ignore(names ...string) {
	for _, n := range names {
		a.ignored[n] = true
	}
}
