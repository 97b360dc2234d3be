package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// maxFuncLines is the house ceiling on a function (common brief: no
// function over 100 lines), counted from func to its closing brace.
const maxFuncLines = 100

// TestNoCommandFunctionOver100Lines: every function of the commands'
// non-test files fits in maxFuncLines; a subcommand's Action that grows
// past it is split by concern (nodesCheck: check, table, notes;
// serveAction: the lock, then serveLoop).
func TestNoCommandFunctionOver100Lines(t *testing.T) {
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTest, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, over %d: split it by concern", name, fn.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}
