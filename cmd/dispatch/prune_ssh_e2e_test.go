package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/crashpoint"
)

// pruneSSHHome is a home whose one node, n1, is a real sshd on loopback,
// with project app run three times there: S01 never changes (runs 2 and 3
// reuse run 1's result), S02 changes each run.
func pruneSSHHome(t *testing.T) (h *sshHome, work string, stop, restart func()) {
	t.Helper()
	h = newSSHHome(t)
	s := h.client.StartServer(t, "n1")
	h.client.Trust(t, s)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  ssh_connect_timeout: 2s
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
`, h.client.User, s.Port, s.WorkDir))
	dir := filepath.Join(h.home, "specs", "app")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(dir, "S01-one.md"), "echo one > one.txt\n")
	for i := 1; i <= 3; i++ {
		writeFile(t, filepath.Join(dir, "S02-two.md"), fmt.Sprintf("echo two-%d > two.txt\n", i))
		if r := h.run(t, "start", "app"); r.code != 0 {
			t.Fatalf("run %d: %s", i, r)
		}
	}
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\nretention: {runs: 1}\n")
	return h, s.WorkDir, func() { s.Stop(t) }, func() { s.Restart(t) }
}

// TestPruneSSHNode: retention {runs: 1} over three real runs on an sshd
// node. With the node's sshd stopped the prune exits 1 naming the node and
// what to do, removes nothing of the runs it could not finish and keeps
// them marked (not listed); with the node back a prune killed midway
// removes run 1's files, and the next finishes both runs: archives, rows
// and the node's attempt directories of runs 1 and 2 gone, run 3's intact,
// and a fourth run still reuses S01's result.
func TestPruneSSHNode(t *testing.T) {
	h, work, stop, restart := pruneSSHHome(t)
	tasks := filepath.Join(work, "app", "tasks")
	gone := []string{filepath.Join(tasks, "S02", "attempts", "1"), filepath.Join(tasks, "S02", "attempts", "2"),
		filepath.Join(h.home, "runs", "app", "run-1"), filepath.Join(h.home, "runs", "app", "run-2")}
	kept := []string{filepath.Join(tasks, "S02", "output", "two.txt"), filepath.Join(tasks, "S01", "status.json"),
		filepath.Join(tasks, "S01", "output", "one.txt"), filepath.Join(h.home, "runs", "app", "S02", "output", "two.txt")}
	for _, p := range append(gone, kept...) {
		if !exists(p) {
			t.Fatalf("%s missing before the prune", p)
		}
	}

	stop()
	r := h.run(t, "prune", "app")
	if r.code != 1 || !strings.Contains(r.stdout, "PROBLEM run 1 of app: node n1: ") ||
		!strings.Contains(r.stdout, "PROBLEM run 2 of app: node n1: failed earlier in this prune") ||
		!strings.Contains(r.stdout, "pruned 0 run(s) of app") || !strings.Contains(r.stdout, "2 run(s) left for the next prune") ||
		!strings.Contains(r.stdout, "`dispatch nodes check n1`), `dispatch prune app` finishes it") {
		t.Fatalf("prune with n1 down: %s", r)
	}
	for _, p := range append(gone, kept...) {
		if !exists(p) {
			t.Errorf("%s removed while n1 was down", p)
		}
	}
	if got := listedRuns(t, h.home); fmt.Sprint(got) != "[3]" {
		t.Errorf("runs after the failed prune = %v, want [3] (1 and 2 marked)", got)
	}

	// With n1 back, a prune killed after run 1's files (its node
	// directory and archive), before its rows.
	restart()
	r = runDispatch(t, append([]string{crashpoint.Env + "=" + crashpoint.MidPrune}, h.env...), "--home", h.home, "prune", "app")
	if r.code != -1 || exists(gone[0]) || exists(gone[2]) || !exists(gone[1]) || !exists(gone[3]) {
		t.Fatalf("a prune killed midway should have removed run 1's files only: %s", r)
	}
	r = h.run(t, "prune", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "app run 1 (an earlier prune began it)") ||
		!strings.Contains(r.stdout, "app run 2 (an earlier prune began it)") || !strings.Contains(r.stdout, "pruned 2 run(s) of app") {
		t.Fatalf("prune with n1 back: %s", r)
	}
	for _, p := range gone {
		if exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range kept {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if r := h.run(t, "prune", "app"); r.code != 0 || !strings.Contains(r.stdout, "app: nothing to prune") {
		t.Errorf("a third prune: %s", r)
	}
	if b := readFile(t, filepath.Join(tasks, "S02", "output", "two.txt")); b != "two-3\n" {
		t.Errorf("S02's result on n1 = %q, want run 3's", b)
	}
	writeFile(t, filepath.Join(h.home, "specs", "app", "S02-two.md"), "echo two-9 > two.txt\n")
	if r := h.run(t, "start", "app"); r.code != 0 || !strings.Contains(r.stdout, "1 task(s) to run, 1 reused") {
		t.Fatalf("a run after the prune: %s", r)
	}
	if !exists(filepath.Join(tasks, "S01", "output", "one.txt")) || !exists(filepath.Join(tasks, "S02", "status.json")) {
		t.Errorf("the fourth run's node directories are missing")
	}
}
