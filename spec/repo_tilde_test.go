package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// TestRepoTilde: repo: ~/x is the operator's home's x, as work_dir: ~/x is
// the node user's; ~user is refused with the fix.
func TestRepoTilde(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("base")
	t.Setenv("HOME", filepath.Dir(op.Dir))
	specs := t.TempDir()
	write := func(yaml string) {
		t.Helper()
		for name, body := range map[string]string{"project.yaml": yaml, "S01-a.md": "echo a\n"} {
			if err := os.MkdirAll(filepath.Join(specs, "p"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(specs, "p", name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("tool: shell\nrepo: ~/" + filepath.Base(op.Dir) + "\n")
	p, err := Load(specs, "p")
	if err != nil {
		t.Fatalf("repo: ~/%s: %v", filepath.Base(op.Dir), err)
	}
	if p.Config.Source == nil {
		t.Fatalf("repo: ~/...: no source resolved")
	}
	write("tool: shell\nrepo: ~bob/x\n")
	if _, err := Load(specs, "p"); err == nil || !strings.Contains(err.Error(), "~bob") || !strings.Contains(err.Error(), "fix:") {
		t.Fatalf("repo: ~bob/x: %v; want an error naming it, with a fix", err)
	}
}
