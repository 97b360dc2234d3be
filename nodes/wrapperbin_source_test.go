package nodes

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/wrapperdeps"
)

// TestSourceVersionHashesEverySource: a wrapper built on demand (go test,
// go run) is cached by the hash of its source; a change in any package it
// is built from must change that hash, or every later run keeps using the
// stale build (the hash once covered wrapper/*.go only, not the packages
// under wrapper/ nor wire/).
func TestSourceVersionHashesEverySource(t *testing.T) {
	root, err := sourceRoot()
	if err != nil {
		t.Skip(err)
	}
	hashed, err := wrapperSourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	built, err := wrapperdeps.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range built {
		if !slices.Contains(hashed, f) {
			t.Errorf("the wrapper is built from %s but its on-demand version does not hash it", f)
		}
	}
	// A change in a package under wrapper/ changes the version.
	tmp := t.TempDir()
	for _, f := range append(hashed, filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")) {
		rel, _ := filepath.Rel(root, f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, err := sourceVersion(tmp)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tmp, "wrapper", "sandbox", "doc.go")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, append(b, "\n// changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	after, err := sourceVersion(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Errorf("a change in wrapper/sandbox left the wrapper version at %s", before)
	}
}
