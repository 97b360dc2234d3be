package controller

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestForgedFinalStatusIsKilled: a tool that rewrites its own status.json
// to "completed" (the task can write anything in its task directory) and
// goes on running. Its supervisor is alive and the wrapper finds the
// tool's group still running: the attempt is stale and killed, however
// final its status.json says it is. (Found by review: exempting every
// final status of a live supervisor let it run on, outside any slot.)
func TestForgedFinalStatusIsKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "tool.pid")
	script := `a=$(grep -o '"attempt":[0-9]*' ../status.json | tr -dc 0-9)
echo $$ > ` + pidFile + `
while :; do
  printf '{"task":"S01","attempt":%s,"status":"completed","exit_code":0}\n' "$a" > ../status.tmp
  mv ../status.tmp ../status.json
  sleep 0.05
done
`
	h := newHarness(t, unsandboxed("", "the attack needs the unconfined task's reach: its status.json, and its pid written outside its workspace"),
		shellProject(map[string]string{"S01-a.md": script, "S02-b.md": "sleep 60\n"}))
	h.tickUntil("S01 to be recorded completed", func() bool { return h.task("S01").Status == domain.Completed })
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 1 {
		t.Fatalf("tool pid %q", b)
	}
	defer syscall.Kill(-pid, syscall.SIGKILL)
	defer killAll(t, h)
	// S02 keeps the project open: the tool is killed for its forgery, not
	// because the project ended.
	h.tickUntil("the forging tool to be killed", func() bool { return syscall.Kill(pid, 0) != nil })
	if st := h.task("S02").Status; st != domain.Running {
		t.Errorf("S02 is %s: the project ended before the forgery was caught", st)
	}
	if len(h.events("stale")) == 0 {
		t.Errorf("no stale event: %s", h.dump())
	}
}

// TestFinalStatusOfALiveSupervisor: a supervisor alive behind a final
// status is only left alone when the wrapper saw its tool's group gone
// (it is exiting); with the tool still running the attempt is stale, and
// its retry waits for the kill.
func TestFinalStatusOfALiveSupervisor(t *testing.T) {
	for _, toolRunning := range []bool{false, true} {
		c := decider(t, decideNodes)
		tasks := []domain.Task{{Project: "p", ID: "S01", Status: domain.Running, Node: "n1", Attempt: 1, MaxRetries: 2,
			Heartbeat: "1", HeartbeatAt: t0.Add(-time.Minute)}}
		pulls := nodeSays(map[string]any{"n1": []wire.TaskStatus{{Project: "p", Task: "S01", Alive: true, Heartbeat: "1",
			ToolRunning: toolRunning, Status: &wire.Status{Status: wire.StatusFailed, Attempt: 1, ErrorClass: wire.ClassExit, ExitCode: 1}}}})
		snap := wholeSnapshot(tasks, projectFacts{}, nil)
		plan := c.decideApply(snap, pulls, nil, nil, t0)
		if tasks[0].Status != domain.Pending {
			t.Fatalf("S01 is %s, want pending (retried)", tasks[0].Status)
		}
		if stale := len(plan.stale) > 0; stale != toolRunning {
			t.Errorf("tool running %v: stale %v", toolRunning, stale)
		}
	}
}
