package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the house ceiling on a function (common brief: no
// function over 100 lines), counted from func to its closing brace.
const maxFuncLines = 100

// TestNoCommandFunctionOver100Lines: every function of the module's
// non-test files outside bench/ fits in maxFuncLines; one that grows past
// it is split by concern, what it decides apart from what it does
// (nodesCheck: check, table, notes; serveAction: the lock, then serveLoop;
// spec's frontMatter: taskKey and runKey; plan.AddProject:
// decideTaskSync, then syncTask; the controller's prepareLaunch:
// composeLaunch and launchSpec).
func TestNoCommandFunctionOver100Lines(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "bench" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, over %d: split it by concern", path, fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
