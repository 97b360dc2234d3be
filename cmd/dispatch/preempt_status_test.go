package main

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// TestStatusShowsPreemptions: status counts the run's preemptions in its
// summary line and each task's beside its attempt, with the class of a
// task waiting after one.
func TestStatusShowsPreemptions(t *testing.T) {
	v := &readmodel.StatusView{Project: "p", Phase: domain.PhaseImplementation, Preemptions: 1,
		Tasks: []readmodel.TaskView{
			{ID: "S01", Title: "long", Status: domain.Pending, Node: "n1", Attempt: 1, Preemptions: 1,
				ErrorClass: "preempted", Error: "preempted on n1 by hot/S01 (priority 1; this task's is 9)"},
			{ID: "S02", Title: "other", Status: domain.Running, Node: "n1", Attempt: 1},
		}}
	v.Counts.Add(domain.Pending)
	v.Counts.Add(domain.Running)
	var b strings.Builder
	printStatus(&b, newStyles(false), v, nil)
	out := b.String()
	for _, want := range []string{"1 running · 1 pending · 1 preempted", "1 (1 preempted)", "preempted: preempted on n1 by hot/S01"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "preempted)") != 1 {
		t.Errorf("a task never preempted is shown as preempted:\n%s", out)
	}
}
