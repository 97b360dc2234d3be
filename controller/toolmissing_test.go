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
	"github.com/dispatch-tool/dispatch/wire"
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
	tk := failedForGood(h, "S01")
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

// TestToolUnusableInTheSandboxIsNotRetried: on a `sandbox: on` node, a
// tool that lies under /tmp (which the sandbox replaces with the
// attempt's own) fails once as start_permanent and is not retried, saying
// so and naming the fix; it used 4 attempts of 4 (issue 32 item 4).
func TestToolUnusableInTheSandboxIsNotRetried(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "dispatch-tool-under-tmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tool := filepath.Join(dir, "mytool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho ran > ran.txt\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "controller: {retry_backoff: 1s, max_retries: 3}\n" +
		"nodes: [{name: local, slots: 1, work_dir: WORK, sandbox: on}]\n" +
		"tools: {tmptool: {command: [" + tool + ", \"{spec}\"]}}\n"
	h := newHarness(t, yaml, map[string]string{
		"project.yaml": "integration: false\n",
		"S01-a.md":     "---\ntool: tmptool\n---\nDo it.\n",
	})
	tk := failedForGood(h, "S01")
	if tk.Status != domain.Failed || tk.Attempt != 1 || tk.ErrorClass != wire.ClassStartPermanent {
		t.Fatalf("S01: %s attempt %d class %q; want failed after one attempt, class start_permanent", tk.Status, tk.Attempt, tk.ErrorClass)
	}
	if !strings.Contains(tk.Error, "under /tmp") || !strings.Contains(tk.Error, "sandbox: off") {
		t.Fatalf("S01's error %q does not say why and the fix", tk.Error)
	}
	if evs := h.events("gave_up"); len(evs) != 1 || !strings.Contains(evs[0].Message, "not retried") || !strings.Contains(evs[0].Message, "install it elsewhere") {
		t.Fatalf("gave_up events = %+v; want one saying it is not retried, with the fix", evs)
	}
}

// failedForGood ticks until task id fails, then five minutes more, in
// which any retry would have run, and returns the task. Until it fails the
// clock moves 2 s a tick, past retry_backoff (1 s): a minute a tick made
// the attempt hung (heartbeat_timeout 2m by this clock) when a loaded
// machine took more than two ticks to start it, and a hung attempt is
// retried (2 of 20 runs under load).
func failedForGood(h *harness, id string) domain.Task {
	h.tickUntil(id+" to fail", func() bool {
		h.clock.Advance(2 * time.Second)
		return h.task(id).Status == domain.Failed
	})
	for range 5 {
		h.clock.Advance(time.Minute)
		h.tick()
	}
	return h.task(id)
}
