package readmodel

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// imports lists what the non-test Go files matching pattern import.
func imports(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	out := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[f] = append(out[f], p)
		}
	}
	return out
}

// TestReadModelsDependOnTheStoreOnly: the views read the database (and
// know the home's layout) and nothing of the engine, the nodes or the
// wrapper.
func TestReadModelsDependOnTheStoreOnly(t *testing.T) {
	const mod = "github.com/dispatch-tool/dispatch/"
	allowed := map[string]bool{mod + "domain": true, mod + "store": true, mod + "home": true, mod + "internal/termtext": true}
	for f, imps := range imports(t, "*.go") {
		for _, p := range imps {
			if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") && !allowed[p] {
				t.Errorf("%s imports %s; the read models may import only the standard library, domain, store, home and internal/termtext", f, p)
			}
		}
	}
}

// TestReadOnlyCommandsDoNotImportTheEngine: status, report, watch, logs
// and events are built on the read models, never on the controller.
func TestReadOnlyCommandsDoNotImportTheEngine(t *testing.T) {
	for _, name := range []string{"status", "report", "watch", "logs", "events", "styles"} {
		for f, imps := range imports(t, filepath.Join("..", "cmd", "dispatch", name+".go")) {
			for _, p := range imps {
				if strings.HasSuffix(p, "/controller") {
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
