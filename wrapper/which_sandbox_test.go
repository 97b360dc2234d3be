//go:build linux

package wrapper

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestWhichSaysWhatTheSandboxRefuses: the wrapper installed in a work_dir
// where bwrap works answers `which` with the tool under /tmp refused, with
// the fix, and /bin/sh not.
func TestWhichSaysWhatTheSandboxRefuses(t *testing.T) {
	n := newSandboxNode(t, "")
	dir, err := os.MkdirTemp("/tmp", "dispatch-which-tmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "tmptool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(n.bin, "which", "tmptool", "sh")
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "HOME=" + n.home}
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.Output()
	var r wire.WhichReply
	if err != nil || json.Unmarshal(out, &r) != nil {
		t.Fatalf("which: %v: %s", err, out)
	}
	if r.Found["tmptool"] == "" || !strings.Contains(r.SandboxRefused["tmptool"], "under /tmp") ||
		!strings.Contains(r.SandboxRefused["tmptool"], "sandbox: off") || r.SandboxRefused["sh"] != "" {
		t.Fatalf("which: found %v, sandbox_refused %q; want tmptool refused under /tmp with the fix, sh not", r.Found, r.SandboxRefused)
	}
}
