package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
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

// procGone reports whether pid has exited (gone, or a zombie nobody reaped).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

func requireProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
}

// TestFrozenWrapperIsKilledAsHungAndRetried: a wrapper that is alive but
// frozen (SIGSTOP) stops beating; after heartbeat_timeout on the
// controller's clock the attempt fails as hung, the frozen wrapper and its
// tool are killed, and only then does the retry launch.
func TestFrozenWrapperIsKilledAsHungAndRetried(t *testing.T) {
	requireProc(t)
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-long.md": "if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 60; fi\necho done > done.txt\n",
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	pid, toolPID, _, _ := h.statusFile("S01")
	// Freeze the wrapper: it holds its lock (alive) but beats no more.
	if err := signal(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		signal(pid, syscall.SIGKILL)
		signal(-toolPID, syscall.SIGKILL)
	})
	h.tick()
	h.clock.Advance(h.cfg.Controller.HeartbeatTimeout - time.Second)
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Running {
		t.Fatalf("before heartbeat_timeout: %s", h.dump())
	}
	h.clock.Advance(2 * time.Second)
	h.tick()
	tk := h.task("S01")
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	if tk.RetriesUsed != 1 || runs[0].ErrorClass != "hung" || !strings.Contains(runs[0].Error, "heartbeat unchanged") {
		t.Fatalf("after heartbeat_timeout: runs[0] %q %q; %s", runs[0].ErrorClass, runs[0].Error, h.dump())
	}
	// The backoff is over at once; the retry must still wait for the kill.
	h.clock.Advance(time.Minute)
	deadline := time.Now().Add(60 * time.Second)
	for !procGone(pid) || !procGone(toolPID) {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen wrapper (gone %v) or its tool (gone %v) still lives; %s", procGone(pid), procGone(toolPID), h.dump())
		}
		h.tick()
		if tk := h.task("S01"); tk.Attempt != 1 && (!procGone(pid) || !procGone(toolPID)) {
			t.Fatalf("attempt %d launched while the hung attempt still lives", tk.Attempt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.tickUntil("the retry to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 2 {
		t.Fatalf("completed at attempt %d, want 2", tk.Attempt)
	}
}

// TestOrphanIsKilledBeforeTheRetry: a wrapper killed with SIGKILL leaves
// what its tool started running; the crash is retried on another node only
// after the orphan's group is dead.
func TestOrphanIsKilledBeforeTheRetry(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 1s
  max_retries: 2
nodes:
  - name: a
    slots: 1
    work_dir: WORK/a
  - name: b
    slots: 1
    work_dir: WORK/b
`
	dir := t.TempDir()
	orphanFile, result := filepath.Join(dir, "orphan.pid"), filepath.Join(dir, "result")
	// Unsandboxed: the tool writes its orphan's pid outside its workspace,
	// and the retry must see the orphan's process (a sandbox's pid
	// namespace hides it).
	h := newHarness(t, unsandboxed(yaml, "the tool writes its orphan's pid outside its workspace"), shellProject(map[string]string{
		"S01-x.md": fmt.Sprintf(`if [ "$DISPATCH_ATTEMPT" = 1 ]; then sleep 300 & echo $! > '%[1]s'; wait; fi
p=$(cat '%[1]s')
s=$(ps -o stat= -p "$p")
case "$s" in ""|Z*) echo dead;; *) echo alive;; esac > '%[2]s'
`, orphanFile, result),
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	node := h.task("S01").Node
	var orphan int
	deadline := time.Now().Add(10 * time.Second)
	for orphan <= 1 {
		if time.Now().After(deadline) {
			t.Fatal("the tool never wrote its orphan's pid")
		}
		b, _ := os.ReadFile(orphanFile)
		orphan, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { signal(orphan, syscall.SIGKILL) })
	pid := 0
	b, _ := os.ReadFile(filepath.Join(h.work, node, "p", "tasks", "S01", "status.json"))
	var st struct{ PID int }
	if json.Unmarshal(b, &st); st.PID <= 1 {
		t.Fatalf("no wrapper pid in %s", b)
	}
	pid = st.PID
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for h.task("S01").Status != domain.Completed {
		if time.Now().After(deadline) {
			t.Fatalf("the retry did not complete; %s", h.dump())
		}
		h.tick()
		h.clock.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	if runs[0].ErrorClass != "crash" {
		t.Fatalf("attempt 1 class %q, want crash", runs[0].ErrorClass)
	}
	if got, _ := os.ReadFile(result); strings.TrimSpace(string(got)) != "dead" {
		t.Fatalf("attempt 2 (on %s) found attempt 1's orphan %q", h.task("S01").Node, got)
	}
	if len(h.events("orphan")) == 0 {
		t.Fatal("no orphan event")
	}
}

func TestCorruptStatusWithDeadWrapperIsACrash(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-long.md": "if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 20; fi\n"}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	pid, toolPID, _, _ := h.statusFile("S01")
	// Half-written status.json while the wrapper lives: a warning, no verdict.
	file := filepath.Join(h.work, "p", "tasks", "S01", "status.json")
	if err := os.WriteFile(file, []byte(`{"task":"S01","attem`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Running || !strings.Contains(tk.Warning, "status.json") {
		t.Fatalf("with a corrupt status and a live wrapper: %s, warning %q", tk.Status, tk.Warning)
	}
	// The wrapper dies with its status corrupt: a crash, retried.
	signal(pid, syscall.SIGKILL)
	signal(-toolPID, syscall.SIGKILL)
	os.WriteFile(file, []byte(`{"task":"S01","attem`), 0o644)
	h.tickUntil("crash to be recorded", func() bool { return h.task("S01").RetriesUsed == 1 })
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	if runs[0].ErrorClass != "crash" || !strings.Contains(runs[0].Error, "unreadable") {
		t.Fatalf("attempt 1: %q %q", runs[0].ErrorClass, runs[0].Error)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("retry to complete", func() bool { return h.task("S01").Status == domain.Completed })
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
	// The first attempt runs long on whichever node takes it (the two are
	// equal, so either may); the retry, on the other node, ends at once.
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-x.md": "echo \"$DISPATCH_NODE\" > node.txt\nif [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 30; fi\n",
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	first := h.task("S01").Node
	other := map[string]string{"a": "b", "b": "a"}[first]
	// The controller gave the attempt up (as after a long node outage):
	// lost and requeued, while it still runs on its node.
	ctx := context.Background()
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: domain.Running, To: domain.Lost,
			Set: store.TaskPatch{ErrorClass: new(classLost)}}); err != nil {
			return err
		}
		_, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: domain.Lost, To: domain.Pending})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	staleStatus := filepath.Join(h.work, first, "p", "tasks", "S01", "status.json")
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(ctx, "p")
		return p.State == domain.ProjectDone
	})
	tk := h.task("S01")
	if tk.Status != domain.Completed || tk.Node != other || tk.Attempt != 2 {
		t.Fatalf("S01 %s on %s attempt %d, want completed on %s at attempt 2", tk.Status, tk.Node, tk.Attempt, other)
	}
	if len(h.events("stale")) == 0 {
		t.Fatal("no stale event")
	}
	var st struct{ Status, ErrorClass string }
	b, _ := os.ReadFile(staleStatus)
	_ = json.Unmarshal(b, &st)
	if st.Status != "killed" {
		t.Fatalf("the stale attempt on %s is %q, want killed", first, st.Status)
	}
	out, _ := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "node.txt"))
	if strings.TrimSpace(string(out)) != other {
		t.Fatalf("collected output from %q, want the winning attempt's (%s)", out, other)
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
		return p.State == domain.ProjectDone
	})
	if tk := h.task("S03"); tk.Status != domain.Canceled || tk.Attempt != 0 {
		t.Fatalf("S03 %s attempt %d, want canceled before it ran", tk.Status, tk.Attempt)
	}
	if len(h.events("halt")) == 0 {
		t.Fatal("no halt event")
	}
	p, _ := h.st.Project(context.Background(), "p")
	if p.Result != domain.ResultFailed {
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
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: domain.Claimed, To: domain.Failed,
			Set: store.TaskPatch{ErrorClass: new("start")}}); err != nil {
			return err
		}
		_, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: domain.Failed, To: domain.Pending, Set: store.TaskPatch{RetriesUsed: new(1)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("retry to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Node != "b" {
		evs, _ := h.st.Events(context.Background(), "", 0, 0)
		t.Fatalf("retry ran on %s, want b (a failed to start it; a is otherwise less loaded); events: %+v", tk.Node, evs)
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
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S01", From: domain.Claimed, To: domain.Completed}); err != nil {
			return err
		}
		return tx.SetAttempt(ctx, "p", "S01", a, store.AttemptPatch{Status: new(domain.Completed)})
	}); err != nil {
		t.Fatal(err)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Completed {
		t.Fatalf("requeued before node_offline_timeout: %s", tk.Status)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(ctx, "p")
		return p.State == domain.ProjectDone
	})
	tk := h.task("S01")
	if tk.Node != "b" || tk.Attempt != 2 || tk.Status != domain.Completed {
		t.Fatalf("S01 %s on %s attempt %d", tk.Status, tk.Node, tk.Attempt)
	}
	if len(h.events("requeue")) == 0 {
		t.Fatal("no requeue event")
	}
}
