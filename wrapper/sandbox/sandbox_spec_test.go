package sandbox

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A tool under /tmp cannot run in the sandbox (its /tmp is the attempt's
// own): the attempt is refused with the fix, not left to fail in bwrap's
// exec. One in the workspace, bound in, runs.
func TestExposeToolUnderTmp(t *testing.T) {
	sp := NewSpec("/usr/bin/bwrap", "/srv/work/p/tasks/T1", "/srv/work", []string{"/home/u"}, "/srv/work/.bin", "")
	err := sp.ExposeTool("/tmp/fake-cli/claude", "/srv/work")
	if err == nil || !strings.Contains(err.Error(), "under /tmp, which the sandbox replaces with the attempt's own") {
		t.Errorf("a tool under /tmp: %v, want the refusal", err)
	}
	if err := sp.ExposeTool("/srv/work/p/tasks/T1/output/run.sh", "/srv/work"); err != nil {
		t.Errorf("a tool in the workspace: %v", err)
	}
}

// TestNodeHomesSkipsAMissingHome: a node user without a home (bwtest,
// made with useradd -M) gets a sandbox; hiding its home failed bwrap
// ("Can't mkdir /home/bwtest: Read-only file system").
func TestNodeHomesSkipsAMissingHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "gone"))
	if slices.Contains(NodeHomes(), filepath.Join(dir, "gone")) {
		t.Errorf("nodeHomes() = %q: holds a home that does not exist", NodeHomes())
	}
	t.Setenv("HOME", dir)
	if h := NodeHomes(); len(h) == 0 || h[0] != dir {
		t.Errorf("nodeHomes() = %q, want %s first", h, dir)
	}
}
