package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestNoticesDecided: the decisions that call for a message say so once:
// one per paused api_mode and project in a tick however many of its tasks
// hit the limit, none for a budget with nothing left to cancel
// (TestApplyDecisions has the budget that cancels).
func TestNoticesDecided(t *testing.T) {
	t.Parallel()
	ended, task := endedStatus, decideTask
	tests := []struct {
		name  string
		tasks []domain.Task
		pulls map[string]any
		runs  map[attemptKey]attemptFacts
		opts  domain.ProjectOptions
		spent float64
		want  []string
	}{
		{
			name:  "two tasks limited under one mode: one message",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), task("S02", domain.Running, "n1", 1)},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassRateLimit),
				ended("S02", 1, wire.StatusFailed, wire.ClassRateLimit)}},
			runs: map[attemptKey]attemptFacts{{"p", "S01", 1}: {mode: "team"}, {"p", "S02", 1}: {mode: "team"}},
			want: []string{notify.ModePaused + " p: api_mode team paused until "},
		},
		{
			name:  "a budget with nothing left to cancel",
			tasks: []domain.Task{task("S01", domain.Completed, "n1", 1), task("S02", domain.Canceled, "", 0)},
			pulls: map[string]any{"n1": []wire.TaskStatus{}},
			opts:  domain.ProjectOptions{BudgetUSD: 1},
			spent: 2,
		},
	}
	for _, tt := range tests {
		c := decider(t, decideNodes)
		snap := wholeSnapshot(tt.tasks, projectFacts{opts: tt.opts, usd: tt.spent}, tt.runs)
		plan := c.decideApply(snap, nodeSays(tt.pulls), nil, nil, t0)
		var got []string
		for _, n := range plan.notices {
			got = append(got, n.event+" "+n.project+": "+n.message)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: notices %q, want %q", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tt.want[i]) {
				t.Errorf("%s: notice %q, want %q…", tt.name, got[i], tt.want[i])
			}
		}
	}
}

// TestAlertsDecided: a task that fails for good is told in the tick that
// decides it, with its class and the tasks it blocks, while the others
// still run; a failed gate is told with the end of its output; a task
// with a retry left, or a passing gate, is told nothing.
func TestAlertsDecided(t *testing.T) {
	t.Parallel()
	ended, running, task := endedStatus, runningStatus, decideTask
	outOfRetries := func(id string) domain.Task { tk := task(id, domain.Running, "n1", 3); tk.RetriesUsed = 2; return tk }
	gated := func(passed bool) wire.TaskStatus {
		st := ended("S01", 1, wire.StatusCompleted, "")
		st.Status.Gate = &wire.GateResult{Passed: passed, ExitCode: 1, OutputTail: "FAIL: TestX\n\x1b[31mred\x1b[0m"}
		return st
	}
	tests := []struct {
		name    string
		tasks   []domain.Task
		pulls   map[string]any
		opts    domain.ProjectOptions
		want    []string // "event task class: message"
		blocked []string
		tail    string
	}{
		{
			name:    "fails for good while another runs: told at once, with what it blocks",
			tasks:   []domain.Task{outOfRetries("S01"), task("S02", domain.Running, "n1", 1), task("S03", domain.Pending, "", 0, "S01"), task("S04", domain.Pending, "", 0, "S03")},
			pulls:   map[string]any{"n1": []wire.TaskStatus{ended("S01", 3, wire.StatusFailed, wire.ClassExit), running("S02", 1, "2", true)}},
			want:    []string{"task_failed S01 exit: S01 failed for good on n1 (exit): out of retries (2 of 2 used); it blocks S03, S04"},
			blocked: []string{"S03", "S04"},
		},
		{
			name:  "a retry left: nothing told",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), task("S02", domain.Pending, "", 0, "S01")},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassExit)}},
		},
		{
			name:  "a class that is not retried fails for good at once",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1)},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassOOM)}},
			want:  []string{"task_failed S01 oom: S01 failed for good on n1 (oom): killed for its memory limit"},
		},
		{
			name:  "a failed task gate: gate_failed with the end of its output (the retry is not the end)",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1)},
			pulls: map[string]any{"n1": []wire.TaskStatus{gated(false)}},
			opts:  domain.ProjectOptions{Gate: &domain.GateOptions{Task: "make check"}},
			want:  []string{"gate_failed S01 gate: the gate `make check` failed on S01 attempt 1: exit status 1"},
			tail:  "FAIL: TestX\n\x1b[31mred\x1b[0m",
		},
		{
			name:  "a passing gate: nothing told",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1)},
			pulls: map[string]any{"n1": []wire.TaskStatus{gated(true)}},
			opts:  domain.ProjectOptions{Gate: &domain.GateOptions{Task: "make check"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := decider(t, decideNodes)
			plan := c.decideApply(wholeSnapshot(tt.tasks, projectFacts{opts: tt.opts}, nil), nodeSays(tt.pulls), nil, nil, t0)
			var got []string
			for _, n := range plan.notices {
				got = append(got, n.event+" "+n.task+" "+n.class+": "+n.message)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("notices %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("notice %q, want %q…", got[i], tt.want[i])
				}
			}
			if len(got) == 0 {
				return
			}
			n := plan.notices[0]
			if strings.Join(n.blocked, ",") != strings.Join(tt.blocked, ",") || n.tail != tt.tail ||
				n.event == notify.TaskFailed && !n.logTail {
				t.Errorf("notice %+v: want blocked %q, tail %q, the log's tail asked for", n, tt.blocked, tt.tail)
			}
		})
	}
}

// TestNodeNotices: a node that goes offline or comes back is told once,
// at the change; a node seen for the first time, or still in the same
// state, is not.
func TestNodeNotices(t *testing.T) {
	t.Parallel()
	on := store.Node{Name: "n1", State: store.NodeOnline}
	off := store.Node{Name: "n1", State: store.NodeOffline, LastError: "dial tcp: connection refused", OfflineSince: t0}
	tests := []struct {
		name      string
		prev, now store.Node
		want      string
	}{
		{"goes offline", on, off, "node_offline: node n1 is offline: dial tcp: connection refused"},
		{"comes back", off, on, "node_back: node n1 is back (offline since " + t0.UTC().Format(time.RFC3339) + ")"},
		{"still offline", off, off, ""},
		{"still online", on, on, ""},
		{"first seen offline", store.Node{}, off, ""},
		{"first seen online", store.Node{}, on, ""},
	}
	for _, tt := range tests {
		n, ok := nodeNotice(tt.prev, tt.now)
		got := ""
		if ok {
			got = n.event + ": " + n.message
			if n.project != "" || n.node != "n1" {
				t.Errorf("%s: %+v; want no project, node n1", tt.name, n)
			}
		}
		if !strings.HasPrefix(got, tt.want) || (tt.want == "") != (got == "") {
			t.Errorf("%s: %q, want %q…", tt.name, got, tt.want)
		}
	}
}

// TestTaskFailedErrorClassFromANodeIsCleaned: the error class of a
// task_failed comes from the node's status.json, which a node (or a task
// that rewrote it) may fill with anything: like the error and the log
// tail, it reaches the notification cleaned of terminal controls and
// bounded.
func TestTaskFailedErrorClassFromANodeIsCleaned(t *testing.T) {
	t.Parallel()
	c := decider(t, decideNodes)
	evil := "exit\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J" + strings.Repeat("A", 64<<10)
	task := decideTask("S01", domain.Running, "n1", 1)
	task.MaxRetries = 0
	snap := wholeSnapshot([]domain.Task{task}, projectFacts{}, nil)
	plan := c.decideApply(snap, nodeSays(map[string]any{"n1": []wire.TaskStatus{endedStatus("S01", 1, wire.StatusFailed, evil)}}), nil, nil, t0)
	var found bool
	for _, n := range plan.notices {
		if n.event != notify.TaskFailed {
			continue
		}
		found = true
		m := c.noticeMessage(&projectNoticeFacts{}, n)
		if strings.ContainsAny(m.ErrorClass, "\x1b\x07") || len(m.ErrorClass) > maxNoticeError+64 {
			t.Errorf("error_class as sent: %d bytes, %q…", len(m.ErrorClass), m.ErrorClass[:min(len(m.ErrorClass), 40)])
		}
	}
	if !found {
		t.Fatalf("no task_failed in %+v", plan.notices)
	}
}
