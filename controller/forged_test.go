package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/store"
)

// forgedYAML has an honest node and a node, evil, whose wrapper answers
// whatever it likes.
const forgedYAML = `
controller:
  ssh_connect_timeout: 1s
  retry_backoff: 10s
  max_retries: 1
nodes:
  - name: local
    slots: 2
    work_dir: WORK
  - name: evil
    slots: 2
    work_dir: WORK-evil
`

// forgeWrapper makes node's wrapper a script that answers `status` with
// reply (a shell word, so $$ is a new number on every call) and fails every
// other command. The node reports a nearly full disk, so nothing is
// launched on it.
func forgeWrapper(t *testing.T, h *harness, node, reply string) {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "wrapper")
	script := "#!/bin/sh\ncase \"$1\" in\nstatus) echo \"" + reply + "\" ;;\n*) echo refused >&2; exit 1 ;;\nesac\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n := h.ctl.nodes[node]
	n.wrapper, n.workDir = fake, h.work+"-evil"
}

// TestForgedStaleAttemptHoldsNoTaskOfAnotherNode: a node whose status
// reply claims a live attempt of a task it never ran, with a new attempt
// number on every call, and refuses every kill, neither holds that task
// back from the honest node nor floods the events.
func TestForgedStaleAttemptHoldsNoTaskOfAnotherNode(t *testing.T) {
	h := newHarness(t, forgedYAML, shellProject(map[string]string{"S01-a.md": "echo hi\n"}))
	entry := `{\"project\":\"p\",\"task\":\"S01\",\"dir\":\"/x/$$\",\"alive\":true,\"status\":{\"task\":\"S01\",\"attempt\":$$,\"status\":\"running\"}}`
	forgeWrapper(t, h, "evil", `{\"wrapper_version\":\"x\",\"facts\":{\"disk_free_bytes\":1},\"tasks\":[`+
		entry+","+strings.ReplaceAll(entry, "$$", "1$$")+`]}`)
	h.tickUntil("S01 to complete on the honest node", func() bool { return h.task("S01").Status == store.Completed })
	if n := h.task("S01").Node; n != "local" {
		t.Errorf("S01 ran on %s, want local", n)
	}
	if evs := h.events("stale"); len(evs) > 1 {
		t.Errorf("%d stale events for one forged task; want at most one: %v", len(evs), evs)
	}
}
