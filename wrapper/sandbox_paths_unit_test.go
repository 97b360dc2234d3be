package wrapper

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestSandboxOpenPaths: the argv binds each path with the -try flags, a
// ~/ path also in the private HOME, and the wrapper refuses what nodes.yaml
// should have: a path overlapping the work_dir or opening a whole hidden
// root; launch.json refuses paths that are not absolute, ~/ and clean.
func TestSandboxOpenPaths(t *testing.T) {
	const task, work, home = "/w/p/tasks/T", "/w", "/home/u"
	sp := newSandboxSpec("/usr/bin/bwrap", task, work, []string{home}, "/w/.bin", "")
	missing, err := sp.openPaths(&wire.SandboxPaths{RO: []string{"~/.gitconfig"}, RW: []string{"/opt/cache"}}, home, task, work)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(sp.args("/w/p/tasks/T/output", []string{"true"}), " ")
	for _, want := range []string{
		"--ro-bind-try /home/u/.gitconfig /home/u/.gitconfig --ro-bind-try /home/u/.gitconfig /w/p/tasks/T/home/.gitconfig",
		"--bind-try /opt/cache /opt/cache --unshare-pid",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv %s\nlacks %s", argv, want)
		}
	}
	if len(missing) != 2 {
		t.Errorf("missing %v, want both (neither exists here)", missing)
	}
	for _, bad := range []string{"/w/p", "/", "/home", "/w/.bin"} {
		sp := newSandboxSpec("/usr/bin/bwrap", task, work, []string{home}, "/w/.bin", "")
		if _, err := sp.openPaths(&wire.SandboxPaths{RW: []string{bad}}, home, task, work); err == nil {
			t.Errorf("sandbox path %s was opened", bad)
		}
	}
	good := wire.Launch{Command: []string{"true"}, Sandbox: wire.SandboxBwrap, WorkDir: work, SandboxPaths: &wire.SandboxPaths{RO: []string{"~/go/pkg/mod", "/opt/c"}}}
	if err := normalizeLaunch(&good); err != nil {
		t.Errorf("launch.json with good sandbox_paths: %v", err)
	}
	for _, bad := range []string{"rel", "~", "~/", "/a/../b", "~/a/", "~bob/x", ""} {
		l := wire.Launch{Command: []string{"true"}, Sandbox: wire.SandboxBwrap, WorkDir: work, SandboxPaths: &wire.SandboxPaths{RO: []string{bad}}}
		if err := normalizeLaunch(&l); err == nil {
			t.Errorf("launch.json with sandbox_paths %q was accepted", bad)
		}
	}
}

// A tool under /tmp cannot run in the sandbox (its /tmp is the attempt's
// own): the attempt is refused with the fix, not left to fail in bwrap's
// exec. One in the workspace, bound in, runs.
func TestExposeToolUnderTmp(t *testing.T) {
	sp := newSandboxSpec("/usr/bin/bwrap", "/srv/work/p/tasks/T1", "/srv/work", []string{"/home/u"}, "/srv/work/.bin", "")
	err := sp.exposeTool("/tmp/fake-cli/claude", "/srv/work")
	if err == nil || !strings.Contains(err.Error(), "under /tmp, which the sandbox replaces with the attempt's own") {
		t.Errorf("a tool under /tmp: %v, want the refusal", err)
	}
	if err := sp.exposeTool("/srv/work/p/tasks/T1/output/run.sh", "/srv/work"); err != nil {
		t.Errorf("a tool in the workspace: %v", err)
	}
}

// TestNodeHomesSkipsAMissingHome: a node user without a home (bwtest,
// made with useradd -M) gets a sandbox; hiding its home failed bwrap
// ("Can't mkdir /home/bwtest: Read-only file system").
func TestNodeHomesSkipsAMissingHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "gone"))
	if slices.Contains(nodeHomes(), filepath.Join(dir, "gone")) {
		t.Errorf("nodeHomes() = %q: holds a home that does not exist", nodeHomes())
	}
	t.Setenv("HOME", dir)
	if h := nodeHomes(); len(h) == 0 || h[0] != dir {
		t.Errorf("nodeHomes() = %q, want %s first", h, dir)
	}
}
