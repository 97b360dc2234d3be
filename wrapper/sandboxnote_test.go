package wrapper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"

	"github.com/dispatch-tool/dispatch/wire"
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
		if got := sandboxNoteApplies(tc.status, tc.class, tc.confined); got != tc.want {
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
	sp := newSandboxSpec("/usr/bin/bwrap", task, work, []string{home}, filepath.Join(work, ".bin"), "")
	if _, err := sp.openPaths(&wire.SandboxPaths{RO: []string{"~/go"}, RW: []string{"~/.cache/pip", "~/.npm"}}, home, task, work); err != nil {
		t.Fatal(err)
	}
	want := []string{"output/ (its workspace)", "its own $HOME (" + filepath.Join(task, taskfiles.DirHome) + ")",
		"its own /tmp (new for each attempt, not the node's)", "~/.cache/pip (sandbox_paths rw)"}
	if got := sp.writable(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("writable:\n got %q\nwant %q", got, want)
	}
	note := sandboxNote("it", "n1", sp.writable())
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

// TestSandboxFailureSaysSo: shell tasks in a real bwrap sandbox that write
// outside what they may (/etc, a directory of the node's /tmp, the node
// user's home, a setup writing into /etc, a gate writing into /usr) fail with their own error first,
// then that they ran sandboxed, what they could write (the node's
// sandbox_paths rw among them) and the fix; a task that passes, one
// that times out and an unconfined failure get no such note (issue 32
// item 9).
func TestSandboxFailureSaysSo(t *testing.T) {
	n := newSandboxNode(t, "")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off: this test is of the sandbox's note")
	}
	hostTmp, err := os.MkdirTemp("/tmp", "dispatch-sandbox-note")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostTmp) })
	if err := os.MkdirAll(filepath.Join(n.home, ".cache", "pip"), 0o755); err != nil {
		t.Fatal(err)
	}
	paths := &wire.SandboxPaths{RW: []string{"~/.cache/pip"}}
	tests := []struct {
		id, script string
		gate       string // the task gate's command
		setup      string
		sandbox    string
		timeout    float64
		wantStatus string
		wantFirst  string // the error's start
		note       bool
	}{
		{"ETC", "echo x > /etc/dispatch-note-test", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"HOSTTMP", "echo x > " + hostTmp + "/x", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"HOME", "echo x > " + n.home + "/.config/x", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"GATE", "echo ok > ok", "echo x > /usr/dispatch-note-test", "", wire.SandboxBwrap, 30, wire.StatusFailed, "the task gate failed", true},
		{"SETUP", "true", "", "echo x > /etc/dispatch-note-test", wire.SandboxBwrap, 30, wire.StatusFailed, "setup failed: exit status 2", true},
		{"PASS", "echo x > /tmp/x && echo y > y", "", "", wire.SandboxBwrap, 30, wire.StatusCompleted, "", false},
		{"TIMEOUT", "sleep 30", "", "", wire.SandboxBwrap, 0.5, wire.StatusFailed, "timed out", false},
		{"OPEN", "exit 3", "", "", "", 30, wire.StatusFailed, "exit status 3", false},
	}
	var items []wire.LaunchItem
	for _, tc := range tests {
		l := wire.Launch{Command: shell(tc.script), Setup: tc.setup, Sandbox: tc.sandbox, SandboxPaths: paths}
		if tc.gate != "" {
			l.Gate = &wire.LaunchGate{Command: tc.gate, TimeoutSeconds: 30, Decides: true}
		}
		it := n.item(tc.id, l)
		it.Launch.TimeoutSeconds = tc.timeout
		items = append(items, it)
	}
	n.launch(t, items...)
	for _, tc := range tests {
		st := n.final(t, tc.id)
		if st.Status != tc.wantStatus || !strings.HasPrefix(st.Error, tc.wantFirst) {
			t.Errorf("%s: %s, error %q; want %s, beginning %q", tc.id, st.Status, st.Error, tc.wantStatus, tc.wantFirst)
			continue
		}
		hasNote := strings.Contains(st.Error, "ran sandboxed (bwrap) on node local")
		if hasNote != tc.note {
			t.Errorf("%s: error %q; want the sandbox's note: %v", tc.id, st.Error, tc.note)
			continue
		}
		if !tc.note {
			continue
		}
		want := []string{"; it ran sandboxed", "output/ (its workspace)", "its own /tmp", "~/.cache/pip (sandbox_paths rw)", "sandbox_paths: {rw: [path]}", "sandbox: off"}
		if tc.id == "GATE" {
			want = []string{"; its gate ran sandboxed", "the gate's copy of the result", "its own /tmp", "~/.cache/pip (sandbox_paths rw)", "sandbox_paths: {rw: [path]}", "sandbox: off"}
		}
		for _, w := range want {
			if !strings.Contains(st.Error, w) {
				t.Errorf("%s: error lacks %q: %s", tc.id, w, st.Error)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(hostTmp, "x")); err == nil {
		t.Error("the sandboxed task wrote into the node's /tmp")
	}
}
