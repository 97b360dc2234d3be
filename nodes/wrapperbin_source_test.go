package nodes

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	for _, goos := range []string{"linux", "darwin"} {
		list := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/dispatch-wrapper")
		list.Dir = root
		list.Env = append(os.Environ(), "GOOS="+goos)
		dirs, err := list.Output()
		if err != nil {
			t.Fatalf("go list (%s): %v", goos, err)
		}
		for _, dir := range strings.Fields(string(dirs)) {
			files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") && !slices.Contains(hashed, f) {
					t.Errorf("the wrapper is built from %s (GOOS=%s) but its on-demand version does not hash it", f, goos)
				}
			}
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
