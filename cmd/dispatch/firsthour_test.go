package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateWarnsOfAWorkDirInAGitTree: a local node whose work_dir lies
// inside a git working tree (say the dispatch clone at ~/dispatch) gets a
// warning from validate, naming the node, the tree and the fix; validate
// still passes. The default work_dir, in a HOME that is no checkout, gets
// none.
func TestValidateWarnsOfAWorkDirInAGitTree(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a\n"}})
	clone := filepath.Join(t.TempDir(), "dispatch")
	if out, err := exec.Command("git", "init", "-q", clone).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, "nodes:\n  - name: local\n    ssh: null\n    work_dir: "+clone+"\n")
	r := runDispatch(t, nil, "--home", home, "validate", "p")
	if r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	for _, want := range []string{"warning: node local's work_dir " + clone + " lies inside the git working tree " + clone, "line 2", "~/.dispatch/work"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate's stderr lacks %q:\n%s", want, r.stderr)
		}
	}

	// The default: no work_dir key.
	userHome := t.TempDir()
	writeFile(t, cfg, "nodes:\n  - name: local\n    ssh: null\n")
	r = runDispatch(t, []string{"HOME=" + userHome}, "--home", home, "validate", "p")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("validate with the default work_dir: %s", r)
	}
}

// TestDefaultWorkDirIsNoCheckoutPlace: with no work_dir, the task
// workspaces land in ~/.dispatch/work, not in ~/dispatch where the README
// has you clone dispatch.
func TestDefaultWorkDirIsNoCheckoutPlace(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n"}})
	writeFile(t, filepath.Join(home, "nodes.yaml"), "nodes:\n  - name: local\n    ssh: null\n")
	userHome := t.TempDir()
	if r := runDispatch(t, []string{"HOME=" + userHome}, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	if _, err := os.Stat(filepath.Join(userHome, ".dispatch", "work", "p", "tasks", "S01")); err != nil {
		t.Errorf("no workspace under ~/.dispatch/work: %v", err)
	}
	if _, err := os.Stat(filepath.Join(userHome, "dispatch")); !os.IsNotExist(err) {
		t.Errorf("~/dispatch was made: %v", err)
	}
}

// TestStatusMarksANodeNoLongerConfigured: after nodes.yaml drops the node
// a project's tasks ran on (the SSH quickstart replaces `local` with two
// SSH nodes), status shows those tasks on "local (not in nodes.yaml)", and
// a node still configured plainly.
func TestStatusMarksANodeNoLongerConfigured(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{"hello": {"S01-a.md": "echo a\n"}})
	if r := runDispatch(t, nil, "--home", home, "start", "hello"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	cfg := filepath.Join(home, "nodes.yaml")
	r := runDispatch(t, nil, "--home", home, "status", "hello")
	if r.code != 0 || !strings.Contains(r.stdout, "local") || strings.Contains(r.stdout, "not in nodes.yaml") {
		t.Fatalf("status with local configured: %s", r)
	}
	writeFile(t, cfg, "nodes:\n  - name: box1\n    ssh: null\n    work_dir: "+work+"\n")
	r = runDispatch(t, nil, "--home", home, "status", "hello")
	if r.code != 0 || !strings.Contains(r.stdout, "local (not in nodes.yaml)") {
		t.Fatalf("status after local left nodes.yaml: %s", r)
	}
}
