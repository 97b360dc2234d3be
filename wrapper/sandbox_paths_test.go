//go:build linux

package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestSandboxPaths runs a real sandboxed task on a node whose
// sandbox_paths open ~/ro read-only and ~/rw read-write (and a ~/missing
// that is not there): it reads ~/ro and cannot write it, writes ~/rw, at
// their own places and through its private HOME, and still cannot read
// ~/secret, which is not listed; the missing path is said once in
// wrapper.log.
func TestSandboxPaths(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	for f, data := range map[string]string{"ro/data": "ro-data\n", "rw/old": "old\n", "secret/s": "SECRET\n"} {
		p := filepath.Join(n.home, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`h=%s
cat $h/ro/data > ro-read; cat ~/ro/data > ro-read-home
(echo x > $h/ro/new) 2>/dev/null && echo wrote > ro-wrote
(echo x >> $h/ro/data) 2>/dev/null && echo appended >> ro-wrote
(echo x > ~/ro/new) 2>/dev/null && echo wrote-home >> ro-wrote
echo w > $h/rw/fromtask; echo w2 > ~/rw/fromtask2; cat $h/rw/old > rw-read
cat $h/secret/s > secret 2>/dev/null; ls $h > home-ls 2>/dev/null; true`, n.home)
	dir := n.taskDir("PATHS")
	item := wire.LaunchItem{Dir: dir, Spec: "# paths\n", Launch: wire.Launch{Project: "demo", Task: "PATHS", Attempt: 1, Node: "local",
		Command: shell(script), HeartbeatSeconds: 0.2, TimeoutSeconds: 30, Sandbox: n.mode, WorkDir: n.work,
		SandboxPaths: &wire.SandboxPaths{RO: []string{"~/ro", "~/missing"}, RW: []string{"~/rw"}}}}
	doc, err := json.Marshal(wire.LaunchBatch{Launches: []wire.LaunchItem{item}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bin, "launch")
	cmd.Stdin = bytes.NewReader(doc)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + n.home}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("launch: %v: %s", err, out)
	}
	var st *wire.Status
	wtest.Poll(t, 25*time.Second, "the task to end", func() bool {
		st, err = taskfiles.ReadStatus(dir)
		return err == nil && st.Final()
	})
	wlog, _ := os.ReadFile(filepath.Join(dir, taskfiles.FileWrapper))
	if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap {
		t.Fatalf("the task: %+v, want completed under bwrap\n%s", st, wlog)
	}
	out := func(f string) string {
		data, _ := os.ReadFile(filepath.Join(dir, taskfiles.DirOutput, f))
		return string(data)
	}
	for f, want := range map[string]string{"ro-read": "ro-data\n", "ro-read-home": "ro-data\n", "rw-read": "old\n", "ro-wrote": "", "secret": ""} {
		if got := out(f); got != want {
			t.Errorf("output/%s: %q, want %q", f, got, want)
		}
	}
	if got := out("home-ls"); strings.Contains(got, "secret") {
		t.Errorf("the node user's home shows %q inside the sandbox, want only the opened paths", got)
	}
	if data, _ := os.ReadFile(filepath.Join(n.home, "ro", "data")); string(data) != "ro-data\n" {
		t.Errorf("~/ro/data: %q, the task changed a read-only path", data)
	}
	if _, err := os.Lstat(filepath.Join(n.home, "ro", "new")); err == nil {
		t.Error("the task created a file in a read-only path")
	}
	for f, want := range map[string]string{"fromtask": "w\n", "fromtask2": "w2\n"} {
		if data, _ := os.ReadFile(filepath.Join(n.home, "rw", f)); string(data) != want {
			t.Errorf("~/rw/%s: %q, want %q (the rw path is writable)", f, data, want)
		}
	}
	missing := filepath.Join(n.home, "missing")
	if c := strings.Count(string(wlog), "sandbox_paths: not on this node"); c != 1 || !strings.Contains(string(wlog), missing) {
		t.Errorf("wrapper.log says %d times that a sandbox path is missing, want once naming %s:\n%s", c, missing, wlog)
	}
}
