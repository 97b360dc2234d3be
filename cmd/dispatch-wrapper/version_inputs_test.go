package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/wrapperdeps"
)

// TestWrapperVersionHashesEverySource: the Makefile's wrapper version
// must change whenever any source the wrapper is built from does —
// otherwise a node keeps running the wrapper it has while the controller
// expects the new one (the version once hashed wrapper/*.go only, not
// the packages under wrapper/ nor wire/).
func TestWrapperVersionHashesEverySource(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "wrapper-inputs")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make wrapper-inputs: %v\n%s", err, out)
	}
	hashed := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		if !filepath.IsAbs(f) {
			f = filepath.Join(root, f)
		}
		hashed[f] = true
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !hashed[filepath.Join(root, f)] {
			t.Errorf("the wrapper version does not hash %s", f)
		}
	}
	files, err := wrapperdeps.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !hashed[f] {
			t.Errorf("the wrapper is built from %s but its version does not hash it", f)
		}
	}
}
