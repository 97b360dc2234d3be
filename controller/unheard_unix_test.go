//go:build unix

package controller

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

// TestAsleepNodeOnARealNode: a node asleep three minutes (past
// heartbeat_timeout, 2m; within node_offline_timeout, 5m) with a task
// running there: its pulls fail and its supervisor is frozen (SIGSTOP,
// as a laptop's lid closed). The first reply once the node is back,
// before the supervisor beats again, shows the beat from before: that
// used to fail the attempt as hung and kill it. It runs on and completes
// as attempt 1.
func TestAsleepNodeOnARealNode(t *testing.T) {
	side := t.TempDir()
	started, release := filepath.Join(side, "started"), filepath.Join(side, "release")
	h := newHarness(t, unsandboxed("", "the task tells the test it runs and waits for a file of the test's"), shellProject(map[string]string{
		"S01-wait.md": "touch " + started + "\nuntil [ -e " + release + " ]; do sleep 0.05; done\n",
	}))
	t.Cleanup(func() { killAll(t, h) })
	node := &switchable{Transport: nodes.NewLocal()}
	h.useTransport("local", node)
	h.tickUntil("p/S01's tool to run", func() bool {
		_, err := os.Stat(started)
		return err == nil && h.task("S01").Status == domain.Running
	})

	var st struct {
		PID int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(h.work, "p", "tasks", "S01", "status.json"))
	if err != nil || json.Unmarshal(b, &st) != nil || st.PID <= 0 {
		t.Fatalf("no supervisor pid in p/S01's status.json (%v): %s", err, b)
	}
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(st.PID, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	h.tick() // the last beat before the sleep is the one the controller holds
	if tk := h.task("S01"); tk.Status != domain.Running || tk.Heartbeat == "" {
		t.Fatalf("p/S01 is %s with heartbeat %q before the sleep, want running with a beat seen", tk.Status, tk.Heartbeat)
	}

	node.down.Store(true)
	for range 6 { // 3m, every poll_interval
		h.clock.Advance(30 * time.Second)
		h.tick()
	}
	node.down.Store(false)
	h.clock.Advance(30 * time.Second)
	h.tick() // the supervisor still frozen: the beat from before
	if tk := h.task("S01"); tk.Status != domain.Running || tk.Attempt != 1 {
		t.Fatalf("p/S01 is %s, attempt %d (%s: %s) once its node is back, want running attempt 1: its node slept, it did not hang",
			tk.Status, tk.Attempt, tk.ErrorClass, tk.Error)
	}
	resume()
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("p/S01 to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 1 || tk.RetriesUsed != 0 {
		t.Fatalf("p/S01 completed as attempt %d with %d retries used, want attempt 1", tk.Attempt, tk.RetriesUsed)
	}
}
