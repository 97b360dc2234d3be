package wrapper

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
)

// TestSandboxOpenPaths: the argv binds each path with the -try flags, a
// ~/ path also in the private HOME, and the wrapper refuses what nodes.yaml
// should have: a path overlapping the work_dir or opening a whole hidden
// root; launch.json refuses paths that are not absolute, ~/ and clean.
func TestSandboxOpenPaths(t *testing.T) {
	const task, work, home = "/w/p/tasks/T", "/w", "/home/u"
	sp := sandbox.NewSpec("/usr/bin/bwrap", task, work, []string{home}, "/w/.bin", "")
	missing, err := sp.OpenPaths(&wire.SandboxPaths{RO: []string{"~/.gitconfig"}, RW: []string{"/opt/cache"}}, home, task, work)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(sp.Args("/w/p/tasks/T/output", []string{"true"}), " ")
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
		sp := sandbox.NewSpec("/usr/bin/bwrap", task, work, []string{home}, "/w/.bin", "")
		if _, err := sp.OpenPaths(&wire.SandboxPaths{RW: []string{bad}}, home, task, work); err == nil {
			t.Errorf("sandbox path %s was opened", bad)
		}
	}
	good := wire.Launch{Command: []string{"true"}, Sandbox: wire.SandboxBwrap, WorkDir: work, SandboxPaths: &wire.SandboxPaths{RO: []string{"~/go/pkg/mod", "/opt/c"}}}
	if err := launchfile.Normalize(&good); err != nil {
		t.Errorf("launch.json with good sandbox_paths: %v", err)
	}
	for _, bad := range []string{"rel", "~", "~/", "/a/../b", "~/a/", "~bob/x", ""} {
		l := wire.Launch{Command: []string{"true"}, Sandbox: wire.SandboxBwrap, WorkDir: work, SandboxPaths: &wire.SandboxPaths{RO: []string{bad}}}
		if err := launchfile.Normalize(&l); err == nil {
			t.Errorf("launch.json with sandbox_paths %q was accepted", bad)
		}
	}
}
