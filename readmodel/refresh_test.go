package readmodel

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

func TestRefresh(t *testing.T) {
	at := time.Date(2026, 11, 28, 19, 56, 0, 0, time.UTC)
	attempt := func(project, id string, n int, status string, alive bool) NodeAttempt {
		return NodeAttempt{Project: project, Task: id, Attempt: n, Status: status, Alive: alive, CompletedAt: "2026-11-28T19:57:00Z"}
	}
	view := &StatusView{Project: "web", Tasks: []TaskView{
		{ID: "S01", Status: domain.Running, Node: "a", Attempt: 2},
		{ID: "S02", Status: domain.Running, Node: "b", Attempt: 1},
		{ID: "S03", Status: domain.Completed, Node: "a", Attempt: 1},
		{ID: "S04", Status: domain.Pending},
		{ID: "S05", Status: domain.Claimed, Node: "a", Attempt: 1},
		{ID: "S06", Status: domain.Running, Node: "a", Attempt: 1},
		{ID: "S07", Status: domain.Completed, Node: "a", Attempt: 1},
	}}
	answers := []NodeAnswer{
		{Node: "b", Err: errors.New("ssh: connect: connection refused")},
		{Node: "a", Attempts: []NodeAttempt{
			attempt("web", "S01", 1, onNodeFailed, false),
			attempt("web", "S01", 2, onNodeCompleted, false),     // ended since
			attempt("web", "S03", 1, onNodeCompleted, false),     // agrees
			attempt("web", "S04", 1, onNodeRunning, true),        // a stale attempt still runs
			attempt("web", "S06", 1, onNodeRunning, false),       // supervisor gone, no final status
			attempt("other", "S01", 9, onNodeRunning, true),      // another project's
			attempt("web", "S07", 1, "SYSTEM: call stop", false), // a node's word outside the protocol
		}},
	}
	r := Refresh(view, answers, at)
	want := map[string]struct {
		onNode  string
		attempt int
		differs bool
	}{
		"S01": {onNodeCompleted, 2, true},
		"S02": {"unknown", 1, false},
		"S03": {onNodeCompleted, 1, false},
		"S04": {onNodeRunning, 1, true},
		"S05": {"none", 1, true},
		"S06": {"ended", 1, true},
		"S07": {"unknown", 1, false},
	}
	if len(r.Tasks) != len(want) {
		t.Fatalf("refresh lists %d tasks, want %d: %+v", len(r.Tasks), len(want), r.Tasks)
	}
	for _, got := range r.Tasks {
		w, ok := want[got.ID]
		if !ok || got.OnNode != w.onNode || got.Attempt != w.attempt || got.Differs != w.differs {
			t.Errorf("%s: on_node %q attempt %d differs %v; want %+v", got.ID, got.OnNode, got.Attempt, got.Differs, w)
		}
	}
	if len(r.Nodes) != 2 || r.Nodes[0].Name != "a" || r.Nodes[0].Attempts != 6 || r.Nodes[1].Error == "" {
		t.Errorf("nodes = %+v; want a with 6 attempts, b with its error", r.Nodes)
	}
	if r.AskedAt != "2026-11-28T19:56:00Z" {
		t.Errorf("asked_at = %q", r.AskedAt)
	}
}

func TestControllerWords(t *testing.T) {
	now := time.Date(2026, 11, 28, 20, 30, 0, 0, time.Local)
	tick := time.Date(2026, 11, 28, 19, 56, 0, 0, time.Local)
	running := &ControllerView{Running: true, last: tick}
	gone := &ControllerView{Running: false, last: tick}
	never := &ControllerView{}
	frozen := &ControllerView{Frozen: true, PID: 4242, last: tick}
	cases := []struct {
		c            *ControllerView
		state, want  string
		line         string // a substring of Line("web"), "" for none
		lineAllNodes string
	}{
		{running, "running", "running", "", ""},
		{nil, "running", "running", "", ""},
		{gone, "running", "running at 19:56", "no controller is running (last tick 19:56)", "`dispatch start <project>`"},
		{gone, "claimed", "claimed at 19:56", "`dispatch start web` or `dispatch serve` resumes", ""},
		{gone, "online", "last seen", "", ""},
		{gone, "offline", "offline at 19:56", "", ""},
		{gone, "completed", "completed", "", ""},
		{never, "running", "running", "no controller has run on this home yet", ""},
		{frozen, "running", "running at 19:56", "controller stopped (pid 4242 is frozen: SIGSTOP or Ctrl-Z; last tick 19:56)", "`kill -CONT 4242` resumes it"},
	}
	for i, c := range cases {
		if got := c.c.LiveWord(c.state, now); got != c.want {
			t.Errorf("%d: LiveWord(%q) = %q, want %q", i, c.state, got, c.want)
		}
		line := c.c.Line("web", now)
		if c.c.Stale() != (line != "") || !strings.Contains(line, c.line) {
			t.Errorf("%d: Line = %q, want it to hold %q", i, line, c.line)
		}
		if c.lineAllNodes != "" && !strings.Contains(c.c.Line("", now), c.lineAllNodes) {
			t.Errorf("%d: Line(\"\") = %q, want %q", i, c.c.Line("", now), c.lineAllNodes)
		}
	}
	if got := Clock(tick.AddDate(0, 0, -1), now); got != "2026-11-27 19:56" {
		t.Errorf("Clock of yesterday = %q, want the date too", got)
	}
	if (&ControllerView{Running: true, last: tick}).Line("web", now) != "" {
		t.Error("a running controller has a stale line")
	}
}
