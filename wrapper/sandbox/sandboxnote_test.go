package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func TestSandboxNoteApplies(t *testing.T) {
	tests := []struct {
		status, class string
		confined      bool
		want          bool
	}{
		{wire.StatusFailed, wire.ClassExit, true, true},
		{wire.StatusFailed, wire.ClassCrash, true, true},
		{wire.StatusFailed, wire.ClassGate, true, true},
		{wire.StatusFailed, wire.ClassStart, true, true}, // setup ran and failed
		{wire.StatusFailed, wire.ClassStart, false, false},
		{wire.StatusFailed, wire.ClassStartPermanent, false, false},
		{wire.StatusFailed, wire.ClassExit, false, false}, // not sandboxed
		{wire.StatusFailed, wire.ClassTimeout, true, false},
		{wire.StatusFailed, wire.ClassStalled, true, false},
		{wire.StatusFailed, wire.ClassOOM, true, false},
		{wire.StatusFailed, wire.ClassPids, true, false},
		{wire.StatusFailed, wire.ClassRateLimit, true, false},
		{wire.StatusFailed, wire.ClassAuth, true, false},
		{wire.StatusKilled, wire.ClassKilled, true, false},
		{wire.StatusCompleted, "", true, false},
	}
	for _, tc := range tests {
		if got := NoteApplies(tc.status, tc.class, tc.confined); got != tc.want {
			t.Errorf("sandboxNoteApplies(%s, %s, confined %v) = %v, want %v", tc.status, tc.class, tc.confined, got, tc.want)
		}
	}
}

// TestSandboxWritable: the places named are the attempt's own, and of
// the node's sandbox_paths only the rw ones on the node, as written.
func TestSandboxWritable(t *testing.T) {
	root := t.TempDir()
	home, work := filepath.Join(root, "home"), filepath.Join(root, "work")
	task := filepath.Join(work, "p", "tasks", "S01")
	for _, d := range []string{filepath.Join(home, ".cache", "pip"), filepath.Join(home, "go"), task} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sp := NewSpec("/usr/bin/bwrap", task, work, []string{home}, filepath.Join(work, ".bin"), "")
	if _, err := sp.OpenPaths(&wire.SandboxPaths{RO: []string{"~/go"}, RW: []string{"~/.cache/pip", "~/.npm"}}, home, task, work); err != nil {
		t.Fatal(err)
	}
	want := []string{"output/ (its workspace)", "its own $HOME (" + filepath.Join(task, taskfiles.DirHome) + ")",
		"its own /tmp (new for each attempt, not the node's)", "~/.cache/pip (sandbox_paths rw)"}
	if got := sp.Writable(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("writable:\n got %q\nwant %q", got, want)
	}
	note := Note("it", "n1", sp.Writable())
	for _, s := range []string{"; it ran sandboxed (bwrap) on node n1", "output/ (its workspace)", "~/.cache/pip",
		"Read-only file system", "No such file or directory", "sandbox_paths: {rw: [path]} in nodes.yaml", "sandbox: off"} {
		if !strings.Contains(note, s) {
			t.Errorf("note lacks %q: %s", s, note)
		}
	}
	if strings.Contains(note, "~/go") || strings.Contains(note, "~/.npm") {
		t.Errorf("note names a read-only or missing path as writable: %s", note)
	}
}
