package controller

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/wire"
)

// preemptYAML is a node of two slots whose tasks run sandboxed, with
// preemption at a priority gap of 3.
const preemptYAML = `
controller:
  preemption: {priority_gap: 3, grace: 2s}
nodes:
  - name: local
    slots: 2
    sandbox: on
    work_dir: WORK
`

// lowTask is a priority-9 task without retries that names its session,
// then on its first attempt runs until it is stopped.
const lowTask = "---\npriority: 9\nmax_retries: 0\n---\n# Long and unimportant\n" +
	`echo '{"type":"system","subtype":"init","session_id":"sess-'"$DISPATCH_TASK"'"}'` + "\n" +
	"if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 300; fi\necho done > out.txt\n"

// TestUrgentTaskPreempts is issue 37's acceptance: two priority-9 tasks
// hold both slots of the node; a priority-1 task of another project runs
// within 15 s, having stopped one of them (SIGTERM, SIGKILL after the
// grace, in the sandbox); the stopped one is recorded as preempted, runs
// again without using a retry (max_retries is 0) and completes, its
// session kept for the next attempt to resume; the other one is not
// touched (one preemption for one urgent task).
func TestUrgentTaskPreempts(t *testing.T) {
	h := newHarness(t, preemptYAML, shellProject(map[string]string{"S01-a.md": lowTask, "S02-b.md": lowTask}))
	t.Cleanup(func() { killAll(t, h) })
	ctx := context.Background()
	h.tickUntil("both slots to be taken", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	h.addProject("hot", map[string]string{"project.yaml": "tool: shell\nintegration: false\n",
		"S01-urgent.md": "---\npriority: 1\n---\n# Urgent\necho urgent > out.txt\n"})
	began := time.Now()
	h.tickUntil("the urgent task to run", func() bool {
		u, err := h.st.Task(ctx, "hot", "S01")
		return err == nil && (u.Status == domain.Running || u.Status == domain.Completed)
	})
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("the urgent task ran %s after it was added, want within 15s", took.Round(time.Millisecond))
	}
	var victim, other domain.Task
	for _, id := range []string{"S01", "S02"} {
		if tk := h.task(id); tk.Preemptions == 1 {
			victim = tk
		} else {
			other = tk
		}
	}
	if victim.ID == "" {
		t.Fatalf("no task was preempted:%s", h.dump())
	}
	if other.Preemptions != 0 || other.Attempt != 1 || other.Status != domain.Running {
		t.Errorf("%s was touched too (one urgent task, one preemption): %s attempt %d, %d preemptions", other.ID, other.Status, other.Attempt, other.Preemptions)
	}
	h.tickUntil("the preempted task to complete", func() bool { return h.task(victim.ID).Status == domain.Completed })
	victim = h.task(victim.ID)
	if victim.MaxRetries != 0 || victim.RetriesUsed != 0 || victim.Attempt != 2 {
		t.Errorf("%s: attempt %d, %d of %d retries used; want attempt 2 and no retry used", victim.ID, victim.Attempt, victim.RetriesUsed, victim.MaxRetries)
	}
	runs, err := h.st.Attempts(ctx, "p", victim.ID)
	if err != nil || len(runs) != 2 {
		t.Fatalf("attempts of %s: %v %+v", victim.ID, err, runs)
	}
	first := runs[0]
	if first.Status != domain.Killed || first.ErrorClass != classPreempted || !strings.Contains(first.Error, "by hot/S01 (priority 1") {
		t.Errorf("attempt 1: %s (%s) %q; want killed, preempted, by hot/S01", first.Status, first.ErrorClass, first.Error)
	}
	if first.Sandbox != wire.SandboxBwrap {
		t.Errorf("attempt 1 ran under sandbox %q, want bwrap", first.Sandbox)
	}
	if first.SessionID != "sess-"+victim.ID {
		t.Errorf("attempt 1's session = %q, want sess-%s (kept for the next attempt)", first.SessionID, victim.ID)
	}
	next := victim
	next.Attempt = 2
	if s, err := h.ctl.resumable(ctx, claim{task: next, node: h.ctl.nodes["local"]}); err != nil || s != "sess-"+victim.ID {
		t.Errorf("the attempt after the preemption resumes %q (%v), want sess-%s", s, err, victim.ID)
	}
	if runs[1].Status != domain.Completed {
		t.Errorf("attempt 2: %s, want completed", runs[1].Status)
	}
	evs := h.events(classPreempted)
	if len(evs) != 1 || evs[0].Task != victim.ID || !strings.Contains(evs[0].Message, "does not use max_retries") {
		t.Errorf("preempted events: %+v; want one, for %s", evs, victim.ID)
	}
	if ev := h.events("stale"); len(ev) > 0 {
		t.Errorf("the preempted attempt was announced as stale too: %+v", ev)
	}
	// The urgent task completes; the other priority-9 task still runs.
	h.tickUntil("the urgent task to complete", func() bool {
		u, _ := h.st.Task(ctx, "hot", "S01")
		return u.Status == domain.Completed
	})
	if tk := h.task(other.ID); tk.Status != domain.Running || tk.Attempt != 1 {
		t.Errorf("%s: %s attempt %d, want still running attempt 1", other.ID, tk.Status, tk.Attempt)
	}
	assertPreemptionShown(t, h, victim.ID)
}

// assertPreemptionShown checks that status and the report show the one
// preemption of task id: its count, and the attempt's class.
func assertPreemptionShown(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := context.Background()
	v, err := readmodel.Status(ctx, h.st, h.cfg, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, tv := range v.Tasks {
		per[tv.ID] = tv.Preemptions
	}
	if v.Preemptions != 1 || per[id] != 1 {
		t.Errorf("status: %d preemptions, by task %v; want 1, for %s", v.Preemptions, per, id)
	}
	rep, err := readmodel.BuildReport(ctx, h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	if rep.Totals.Preemptions != 1 || !strings.Contains(string(b), `"preemptions":1`) || !strings.Contains(string(b), `"error_class":"preempted"`) {
		t.Errorf("report: %d preemptions; JSON %s", rep.Totals.Preemptions, b)
	}
	md := rep.Markdown()
	if !strings.Contains(md, "attempts (1 preempted by more urgent tasks)") || !strings.Contains(md, "(preempted)") {
		t.Errorf("report.md does not show the preemption:\n%s", md)
	}
}

// TestPreemptibleFalseProtects: a task whose front matter says
// preemptible: false keeps its slot; the urgent task waits for it.
func TestPreemptibleFalseProtects(t *testing.T) {
	h := newHarness(t, strings.Replace(preemptYAML, "slots: 2", "slots: 1", 1), shellProject(map[string]string{
		"S01-a.md": strings.Replace(lowTask, "priority: 9\n", "priority: 9\npreemptible: false\n", 1)}))
	t.Cleanup(func() { killAll(t, h) })
	if !h.task("S01").NotPreemptible {
		t.Fatal("S01 was stored preemptible")
	}
	h.tickUntil("the slot to be taken", func() bool { return h.task("S01").Status == domain.Running })
	h.addProject("hot", map[string]string{"project.yaml": "tool: shell\nintegration: false\n",
		"S01-urgent.md": "---\npriority: 1\n---\n# Urgent\necho urgent > out.txt\n"})
	for range 5 {
		h.tick()
	}
	u, err := h.st.Task(context.Background(), "hot", "S01")
	if err != nil || u.Status != domain.Pending || h.task("S01").Status != domain.Running || len(h.events(classPreempted)) > 0 {
		t.Errorf("the urgent task is %s (%v), S01 %s, %d preempted events; want pending, running, none",
			u.Status, err, h.task("S01").Status, len(h.events(classPreempted)))
	}
}

// TestOnePreemptionPerUrgentTask: while the attempt an urgent task stopped
// takes its grace to die (its tool ignores SIGTERM, so SIGKILL ends it
// after the grace, which outlasts a tick's wait for the kill), the ticks
// in between stop nothing else, on its node or another the urgent task
// may use: one urgent task, one preemption, and the freed slot is the
// urgent task's.
func TestOnePreemptionPerUrgentTask(t *testing.T) {
	const yaml = `
controller:
  preemption: {priority_gap: 3, grace: 6s}
  ssh_connect_timeout: 1s
nodes:
  - {name: a, slots: 1, sandbox: off, work_dir: WORK/a} # the tool ignores SIGTERM (bwrap would not)
  - {name: b, slots: 1, sandbox: off, work_dir: WORK/b}
`
	stubborn := strings.Replace(lowTask, "# Long and unimportant\n", "# Long and unimportant\ntrap '' TERM\n", 1)
	h := newHarness(t, yaml, shellProject(map[string]string{"S01-a.md": stubborn, "S02-b.md": stubborn}))
	t.Cleanup(func() { killEverywhere(h) })
	// Each tool ignores SIGTERM once it has named its session.
	ignoring := func(node, id string) bool {
		b, _ := os.ReadFile(filepath.Join(h.work, node, "p", "tasks", id, "task.log"))
		return strings.Contains(string(b), "sess-"+id)
	}
	h.tickUntil("both slots to be taken", func() bool {
		return ignoring("a", "S01") && ignoring("b", "S02") || ignoring("a", "S02") && ignoring("b", "S01")
	})
	h.addProject("hot", map[string]string{"project.yaml": "tool: shell\nintegration: false\n",
		"S01-urgent.md": "---\npriority: 1\n---\n# Urgent\necho urgent > out.txt\n"})
	ticks := 0
	h.tickUntil("the urgent task to run", func() bool {
		ticks++
		u, _ := h.st.Task(context.Background(), "hot", "S01")
		return u.Status == domain.Running || u.Status == domain.Completed
	})
	if ticks < 2 {
		t.Fatalf("the urgent task ran after %d tick(s): the stopped attempt did not outlast one", ticks)
	}
	if evs := h.events(classPreempted); len(evs) != 1 {
		t.Errorf("%d preemptions for one urgent task, want 1: %+v", len(evs), evs)
	}
	if evs := h.events("stale"); len(evs) > 0 {
		t.Errorf("the preempted attempt, dying over several ticks, was announced as stale too: %+v", evs)
	}
	running := 0
	for _, id := range []string{"S01", "S02"} {
		if tk := h.task(id); tk.Status == domain.Running && tk.Attempt == 1 {
			running++
		}
	}
	if running != 1 {
		t.Errorf("%d of the priority-9 tasks still run their first attempt, want 1:%s", running, h.dump())
	}
}

// killEverywhere stops every attempt of project p still running on any
// node of the harness, so no process outlives the test.
func killEverywhere(h *harness) {
	tasks, _ := h.st.Tasks(context.Background(), "p")
	for _, n := range h.ctl.nodes {
		inst := n.installed()
		if inst == nil {
			continue
		}
		for _, tk := range tasks {
			_, _ = n.tr.Exec(context.Background(), []string{inst.Path, "kill", "--dir", taskDir(inst, "p", tk.ID), "--grace", "1s"}, nil)
		}
	}
}
