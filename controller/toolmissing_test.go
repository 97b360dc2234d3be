package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
)

// TestMissingToolIsNotRetried: a tool whose executable is not on the node
// fails once, as `start`, and is not retried (no retry can find it); the
// task's log says why, so the file the report points to is not empty.
func TestMissingToolIsNotRetried(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 1s
  max_retries: 3
nodes:
  - name: local
    slots: 1
    work_dir: WORK
tools:
  ghost: { command: [no-such-agent-xyz, --prompt-file, "{spec}"] }
`
	h := newHarness(t, yaml, map[string]string{
		"project.yaml": "integration: false\n",
		"S01-a.md":     "---\ntool: ghost\n---\nDo it.\n",
	})
	h.tickUntil("S01 to fail", func() bool {
		h.clock.Advance(time.Minute)
		return h.task("S01").Status == domain.Failed
	})
	for range 5 {
		h.clock.Advance(time.Minute)
		h.tick()
	}
	tk := h.task("S01")
	if tk.Status != domain.Failed || tk.Attempt != 1 || tk.ErrorClass != "start" {
		t.Fatalf("S01: %s attempt %d class %q; want failed after one attempt, class start", tk.Status, tk.Attempt, tk.ErrorClass)
	}
	if !strings.Contains(tk.Error, "no-such-agent-xyz") || !strings.Contains(tk.Error, "fix:") {
		t.Fatalf("S01's error %q does not name the executable and the fix", tk.Error)
	}
	h.tickUntil("S01's log to be collected", func() bool {
		runs, _ := h.st.Attempts(context.Background(), "p", "S01")
		return len(runs) == 1 && !runs[0].CollectedAt.IsZero()
	})
	log, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "task.log"))
	if err != nil || !strings.Contains(string(log), "dispatch-wrapper: ") || !strings.Contains(string(log), "no-such-agent-xyz") {
		t.Fatalf("task.log = %q (%v); want the wrapper's line naming the executable", log, err)
	}
}
