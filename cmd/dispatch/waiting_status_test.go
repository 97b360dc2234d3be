package main

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// TestStatusShowsWaiting: a task whose batch job waits keeps the status
// running (SPEC's statuses) and its line in `status` and `status --watch`
// says "waiting: " with the scheduler's reason, not a warning; a running
// task with a warning of its own still shows "warning: ".
func TestStatusShowsWaiting(t *testing.T) {
	const reason = "Slurm job 7 PENDING: ReqNodeNotAvail, UnavailableNodes:c01"
	v := &readmodel.StatusView{Project: "p", Phase: domain.PhaseImplementation,
		Tasks: []readmodel.TaskView{
			// The controller sets the task's warning to the reason too
			// (jobWaits): waiting is what the line says.
			{ID: "S01", Title: "queued", Status: domain.Running, Node: "hpc", Attempt: 1, Waiting: reason, Warning: reason, SlurmJob: "7"},
			{ID: "S02", Title: "beats", Status: domain.Running, Node: "hpc", Attempt: 1, Warning: "status.json: unreadable"},
		}}
	v.Counts.Add(domain.Running)
	v.Counts.Add(domain.Running)
	var b strings.Builder
	printStatus(&b, newStyles(false), v, nil)
	rows := taskRows(newStyles(false), v.Tasks, 10, 200)
	for what, out := range map[string]string{"status": b.String(), "status --watch": strings.Join(rows, "\n")} {
		line := func(id string) string {
			for l := range strings.SplitSeq(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), id+" ") {
					return l
				}
			}
			t.Fatalf("%s has no line of %s:\n%s", what, id, out)
			return ""
		}
		if l := line("S01"); !strings.Contains(l, "running") || !strings.Contains(l, "waiting: "+reason) || strings.Contains(l, "warning") {
			t.Errorf("%s: S01's line %q; want running, waiting: %s", what, l, reason)
		}
		if l := line("S02"); !strings.Contains(l, "warning: status.json: unreadable") || strings.Contains(l, "waiting") {
			t.Errorf("%s: S02's line %q; want its warning", what, l)
		}
	}
}
