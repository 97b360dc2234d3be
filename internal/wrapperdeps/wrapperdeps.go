// Package wrapperdeps lists the Go files the node wrapper is built from,
// for the tests that check its version hashes every one of them (the
// Makefile's and the on-demand build's).
package wrapperdeps

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Files returns the non-test Go files of every package of the module at
// root that `go list -deps ./cmd/dispatch-wrapper` names, on Linux and on
// macOS (a node may be either), each once.
func Files(root string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, goos := range []string{"linux", "darwin"} {
		list := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/dispatch-wrapper")
		list.Dir = root
		list.Env = append(os.Environ(), "GOOS="+goos)
		dirs, err := list.Output()
		if err != nil {
			return nil, fmt.Errorf("go list (GOOS=%s): %w", goos, err)
		}
		for _, dir := range strings.Fields(string(dirs)) {
			files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") && !seen[f] {
					seen[f] = true
					out = append(out, f)
				}
			}
		}
	}
	return out, nil
}
