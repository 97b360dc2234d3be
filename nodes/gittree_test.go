package nodes_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
)

// TestGitWorkTree: a directory inside a git working tree (a clone, or a
// linked worktree whose .git is a file), existing or not yet, names the
// tree; one outside any names none.
func TestGitWorkTree(t *testing.T) {
	root := t.TempDir()
	clone := filepath.Join(root, "clone")
	if out, err := exec.Command("git", "init", "-q", clone).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	linked := filepath.Join(root, "linked")
	if err := os.MkdirAll(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(linked, ".git"), []byte("gitdir: "+filepath.Join(clone, ".git")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "elsewhere", "work")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		clone:                                clone,
		filepath.Join(clone, "not", "yet"):   clone,
		filepath.Join(linked, "work") + "/.": linked,
		outside:                              "",
		filepath.Join(root, "missing", "x"):  "",
	} {
		if got := nodes.GitWorkTree(dir); got != want {
			t.Errorf("GitWorkTree(%s) = %q, want %q", dir, got, want)
		}
	}
}
