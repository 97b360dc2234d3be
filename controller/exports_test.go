package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// maxExports is the ceiling issue 24 set on the names package controller
// exports: the engine (New, Run, Tick, its options) and little else.
const maxExports = 25

// TestControllerExportsAtMost25 counts every exported name the package's
// non-test files declare — types, functions, constants, variables and the
// methods of any type, since an exported method of an unexported type is
// still a name a reader must know — and fails above maxExports.
func TestControllerExportsAtMost25(t *testing.T) {
	names := exportedNames(t, ".")
	if len(names) > maxExports {
		t.Errorf("package controller exports %d names, more than %d: %s\n"+
			"move what belongs to another package there, unexport what only tests use",
			len(names), maxExports, strings.Join(names, ", "))
	}
}

func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, dir, notTest, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			names = append(names, fileExports(f)...)
		}
	}
	slices.Sort(names)
	return names
}

func fileExports(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				names = append(names, recvName(d)+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						names = append(names, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// recvName is "T." for a method of T or *T, "" for a function.
func recvName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return ""
	}
	typ := d.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if i, ok := typ.(*ast.IndexExpr); ok {
		typ = i.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "."
	}
	return ""
}
