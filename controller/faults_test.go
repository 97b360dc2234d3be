package controller

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/store"
)

// supervisorPID reads the wrapper's pid of a running task from its node files.
func (h *harness) statusFile(id string) (pid, toolPID, attempt int, status string) {
	h.t.Helper()
	var st struct {
		PID     int    `json:"pid"`
		ToolPID int    `json:"tool_pid"`
		Attempt int    `json:"attempt"`
		Status  string `json:"status"`
	}
	// Wait until the wrapper has recorded both pids: a zero pid would
	// signal the test's own process group.
	deadline := time.Now().Add(10 * time.Second)
	for st.PID <= 1 || st.ToolPID <= 1 {
		if time.Now().After(deadline) {
			h.t.Fatalf("status.json of %s has no pids: %+v", id, st)
		}
		b, err := os.ReadFile(filepath.Join(h.work, "p", "tasks", id, "status.json"))
		if err == nil {
			_ = json.Unmarshal(b, &st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return st.PID, st.ToolPID, st.Attempt, st.Status
}

func (h *harness) events(kind string) []store.Event {
	evs, _ := h.st.Events(context.Background(), "p", 0, 0)
	var out []store.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func TestStaleHeartbeatWithLiveWrapperWarns(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-long.md": "sleep 20\n"}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == store.Running })
	pid, _, _, _ := h.statusFile("S01")
	// Freeze the wrapper: it holds its lock (alive) but beats no more.
	if err := signal(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer signal(pid, syscall.SIGCONT)
	h.tick()
	h.clock.Advance(h.cfg.Controller.HeartbeatTimeout + time.Second)
	h.tick()
	tk := h.task("S01")
	if tk.Status != store.Running || !strings.Contains(tk.Warning, "heartbeat unchanged") {
		t.Fatalf("task %s warning %q, want running with a heartbeat warning", tk.Status, tk.Warning)
	}
	if len(h.events("warning")) != 1 {
		t.Fatalf("warning events = %d, want 1", len(h.events("warning")))
	}
	h.tick()
	if n := len(h.events("warning")); n != 1 {
		t.Fatalf("warning repeated: %d events", n)
	}
	v, _ := Status(context.Background(), h.st, h.cfg, "p", h.clock.Now())
	if v.Tasks[0].Warning == "" {
		t.Fatal("status view has no warning")
	}
	// It wakes up: the next beat clears the warning.
	signal(pid, syscall.SIGCONT)
	h.tickUntil("heartbeat to move again", func() bool { return h.task("S01").Warning == "" })
	h.ctl.Close()
	killAll(t, h)
}

func TestCorruptStatusWithDeadWrapperIsACrash(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-long.md": "if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 20; fi\n"}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == store.Running })
	pid, toolPID, _, _ := h.statusFile("S01")
	// Half-written status.json while the wrapper lives: a warning, no verdict.
	file := filepath.Join(h.work, "p", "tasks", "S01", "status.json")
	if err := os.WriteFile(file, []byte(`{"task":"S01","attem`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != store.Running || !strings.Contains(tk.Warning, "status.json") {
		t.Fatalf("with a corrupt status and a live wrapper: %s, warning %q", tk.Status, tk.Warning)
	}
	// The wrapper dies with its status corrupt: a crash, retried.
	signal(pid, syscall.SIGKILL)
	signal(-toolPID, syscall.SIGKILL)
	os.WriteFile(file, []byte(`{"task":"S01","attem`), 0o644)
	h.tickUntil("crash to be recorded", func() bool { return h.task("S01").RetriesUsed == 1 })
	runs, _ := h.st.Runs(context.Background(), "p", "S01")
	if runs[0].ErrorClass != "crash" || !strings.Contains(runs[0].Error, "unreadable") {
		t.Fatalf("attempt 1: %q %q", runs[0].ErrorClass, runs[0].Error)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("retry to complete", func() bool { return h.task("S01").Status == store.Completed })
}

func TestStaleAttemptIsKilledAndFenced(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 1s
nodes:
  - name: a
    slots: 1
    work_dir: WORK/a
  - name: b
    slots: 1
    work_dir: WORK/b
`
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-x.md": "echo \"$DISPATCH_NODE\" > node.txt\nif [ \"$DISPATCH_NODE\" = a ]; then sleep 30; fi\n",
	}))
	h.tickUntil("task to run on a", func() bool { tk := h.task("S01"); return tk.Status == store.Running && tk.Node == "a" })
	// The controller gave the attempt up (as after a long node outage):
	// lost and requeued, while it still runs on a.
	ctx := context.Background()
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: store.Running, To: store.Lost,
			Set: store.Set{"error_class": store.Lost}}); err != nil {
			return err
		}
		_, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: store.Lost, To: store.Pending})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	aStatus := filepath.Join(h.work, "a", "p", "tasks", "S01", "status.json")
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(ctx, "p")
		return p.State == store.ProjectDone
	})
	tk := h.task("S01")
	if tk.Status != store.Completed || tk.Node != "b" || tk.Attempt != 2 {
		t.Fatalf("S01 %s on %s attempt %d, want completed on b at attempt 2", tk.Status, tk.Node, tk.Attempt)
	}
	if len(h.events("stale")) == 0 {
		t.Fatal("no stale event")
	}
	var st struct{ Status, ErrorClass string }
	b, _ := os.ReadFile(aStatus)
	_ = json.Unmarshal(b, &st)
	if st.Status != "killed" {
		t.Fatalf("the stale attempt on a is %q, want killed", st.Status)
	}
	out, _ := os.ReadFile(filepath.Join(RunsDir(h.home, "p"), "S01", "output", "node.txt"))
	if strings.TrimSpace(string(out)) != "b" {
		t.Fatalf("collected output from %q, want the winning attempt's (b)", out)
	}
}

func TestHaltCancelsWhatHasNotStarted(t *testing.T) {
	specs := shellProject(map[string]string{
		"S01-bad.md":  "---\npriority: 1\nmax_retries: 0\n---\nexit 1\n",
		"S02-next.md": "---\ndepends_on: [S01]\n---\necho never\n",
		"S03-late.md": "---\npriority: 9\n---\necho late\n",
	})
	specs["project.yaml"] = "tool: shell\nintegration: false\nhalt: {fail: 1}\n"
	yaml := `
nodes:
  - name: local
    slots: 1
    work_dir: WORK
`
	h := newHarness(t, yaml, specs)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == store.ProjectDone
	})
	if tk := h.task("S03"); tk.Status != store.Canceled || tk.Attempt != 0 {
		t.Fatalf("S03 %s attempt %d, want canceled before it ran", tk.Status, tk.Attempt)
	}
	if len(h.events("halt")) == 0 {
		t.Fatal("no halt event")
	}
	p, _ := h.st.Project(context.Background(), "p")
	if p.Result != ResultFailed {
		t.Fatalf("result %s", p.Result)
	}
}

func TestRetryPrefersAnotherNodeAfterAStartFailure(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 1s
nodes:
  - name: a
    slots: 2
    work_dir: WORK/a
  - name: b
    slots: 1
    work_dir: WORK/b
`
	h := newHarness(t, yaml, shellProject(map[string]string{"S01-x.md": "echo ok\n"}))
	// a's first launch fails to start (its setup fails there only).
	ctx := context.Background()
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		if _, err := tx.Claim(ctx, "p", "S01", "a"); err != nil {
			return err
		}
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: store.Claimed, To: store.Failed,
			Set: store.Set{"error_class": "start"}}); err != nil {
			return err
		}
		_, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: store.Failed, To: store.Pending, Set: store.Set{"retries_used": 1}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("retry to complete", func() bool { return h.task("S01").Status == store.Completed })
	if tk := h.task("S01"); tk.Node != "b" {
		t.Fatalf("retry ran on %s, want b (a failed to start it; a is otherwise less loaded)", tk.Node)
	}
}

func TestUncollectableCompletedTaskIsRequeued(t *testing.T) {
	yaml := `
controller:
  node_offline_timeout: 1m
nodes:
  - name: a
    slots: 1
    work_dir: WORK/a-is-a-file/work
  - name: b
    slots: 1
    work_dir: WORK/b
`
	h := newHarness(t, yaml, shellProject(map[string]string{"S01-x.md": "echo \"$DISPATCH_NODE\" > node.txt\n"}))
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.work, "a-is-a-file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// S01 completed on a, which then became unreachable before its outputs
	// were collected.
	ctx := context.Background()
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		a, err := tx.Claim(ctx, "p", "S01", "a")
		if err != nil {
			return err
		}
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: store.Claimed, To: store.Completed}); err != nil {
			return err
		}
		return tx.SetRun(ctx, "p", "S01", a, store.Set{"status": store.Completed})
	}); err != nil {
		t.Fatal(err)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != store.Completed {
		t.Fatalf("requeued before node_offline_timeout: %s", tk.Status)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(ctx, "p")
		return p.State == store.ProjectDone
	})
	tk := h.task("S01")
	if tk.Node != "b" || tk.Attempt != 2 || tk.Status != store.Completed {
		t.Fatalf("S01 %s on %s attempt %d", tk.Status, tk.Node, tk.Attempt)
	}
	if len(h.events("requeue")) == 0 {
		t.Fatal("no requeue event")
	}
}
