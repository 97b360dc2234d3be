package nodes

import (
	"os"
	"path/filepath"
)

// GitWorkTree returns the git working tree that dir lies in on this
// machine: the nearest of dir and its parents holding a .git (a directory,
// or the file of a linked worktree or submodule), or "" when there is none.
// dir need not exist yet. Task workspaces under a work_dir inside a
// checkout show up in its `git status`, and a project named like one of its
// directories writes into its files.
func GitWorkTree(dir string) string {
	dir = filepath.Clean(dir)
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
