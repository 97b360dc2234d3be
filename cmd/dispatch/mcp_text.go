package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// The first text block of the MCP tools' answers: a few lines an agent
// reads before the JSON, saying what is, what went wrong and what to call
// next.

// maxListed is how many failed tasks or runs a summary names.
const maxListed = 5

// countsText lists the counts that are not zero: "3 completed, 1 failed".
func countsText(c readmodel.Counts) string {
	var parts []string
	for _, s := range []struct {
		n    int
		word domain.Status
	}{{c.Completed, domain.Completed}, {c.Running, domain.Running}, {c.Claimed, domain.Claimed}, {c.Pending, domain.Pending},
		{c.Failed, domain.Failed}, {c.Blocked, domain.Blocked}, {c.Canceled, domain.Canceled}} {
		if s.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", s.n, s.word))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// failedTasks names the tasks that failed or are blocked, in dispatch's
// words, and returns their errors apart ("S03: exit status 3"), to be
// fenced: an error may quote the task.
// waitingTasks names the tasks launched whose batch job waits, with why
// (a Slurm node's pending reason), at most maxListed.
func waitingTasks(tasks []readmodel.TaskView) string {
	var b strings.Builder
	n := 0
	for _, t := range tasks {
		if t.Waiting == "" {
			continue
		}
		if n == maxListed {
			b.WriteString("…\n")
			break
		}
		n++
		fmt.Fprintf(&b, "%s: %s\n", t.ID, termtext.Clean(truncate(t.Waiting, 200)))
	}
	return b.String()
}

func failedTasks(tasks []readmodel.TaskView) (lines, errs string) {
	var b, e strings.Builder
	n := 0
	for _, t := range tasks {
		if t.Status != domain.Failed && t.Status != domain.Blocked {
			continue
		}
		if n == maxListed {
			b.WriteString("  …\n")
			break
		}
		n++
		msg, _, _ := strings.Cut(t.Error, "\n")
		switch {
		case t.Status == domain.Blocked && msg == "":
			fmt.Fprintf(&b, "  %s blocked: a task it depends on failed or was canceled; it runs once that one is retried and completes\n", t.ID)
			continue
		case t.ErrorClass != "":
			fmt.Fprintf(&b, "  %s %s (attempt %d): %s\n", t.ID, t.Status, t.Attempt, termtext.Clean(t.ErrorClass))
		default:
			fmt.Fprintf(&b, "  %s %s (attempt %d)\n", t.ID, t.Status, t.Attempt)
		}
		if msg != "" {
			fmt.Fprintf(&e, "%s: %s\n", t.ID, termtext.Clean(truncate(msg, 200)))
		}
	}
	return b.String(), e.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// projectStop is whether a project's run was stopped, and dispatch's
// reason when dispatch stopped it ("": the operator did).
type projectStop struct {
	stopped bool
	problem string
}

// statusSummary is a project's status in a few lines; the tasks' errors
// and the reason dispatch stopped it are fenced with f.
func statusSummary(v *readmodel.StatusView, stop projectStop, f fence) string {
	c := v.Counts
	var b strings.Builder
	state := ""
	switch {
	case stop.stopped && stop.problem != "":
		state = ", stopped by dispatch (why: below): nothing new starts"
	case stop.stopped:
		state = ", stopped by the operator: nothing new starts"
	}
	b.WriteString(staleText(v))
	fmt.Fprintf(&b, "%s: phase %s%s; %d task(s): %s.\n", v.Project, v.Phase, state, c.Total(), countsText(c))
	b.WriteString(refreshText(v.Refresh, f))
	lines, errs := failedTasks(v.Tasks)
	b.WriteString(lines)
	b.WriteString(f.wrap("Their errors", errs))
	b.WriteString(f.wrap("Launched but waiting, not running (the scheduler's reason)", waitingTasks(v.Tasks)))
	b.WriteString(f.wrap("Why dispatch stopped it", stop.problem))
	q := fmt.Sprintf("{project: %q}", v.Project)
	switch {
	case stop.stopped:
		states := map[string]domain.Status{}
		for _, t := range v.Tasks {
			states[t.ID] = t.Status
		}
		if c.Running+c.Claimed > 0 {
			b.WriteString("Its running tasks go on and are collected. ")
		}
		if stop.problem != "" {
			b.WriteString("Next: fix what stopped it; then ")
		} else {
			b.WriteString("Next: ")
		}
		fmt.Fprintf(&b, "%s.\n", toolCalls(readmodel.StoppedNext(v.Project, states), v.Project))
	case v.Phase == domain.PhaseDone && c.Failed+c.Blocked+c.Canceled == 0:
		fmt.Fprintf(&b, "Finished. Next: report %s.\n", q)
	case v.Phase == domain.PhaseDone:
		fmt.Fprintf(&b, "Finished, not every task passed. Next: report %s; logs of a failed task; retry its ID to run it again.\n", q)
	case c.Running+c.Claimed+c.Pending > 0:
		fmt.Fprintf(&b, "In progress. Next: status %s again in a while, or events with a cursor for what changed.\n", q)
	default:
		fmt.Fprintf(&b, "Nothing runs or waits now: the project is moving on to its next phase. Next: status %s again in a while.\n", q)
	}
	return b.String()
}

// staleText is the first line of a status answer when no controller runs:
// an operator waiting on "running" would wait forever.
func staleText(v *readmodel.StatusView) string {
	if v.Settled() || !v.Controller.Stale() {
		return ""
	}
	when := "no controller has run yet"
	if v.Controller.LastSeen != "" {
		when = "last tick " + v.Controller.LastSeen
	}
	if v.Controller.Frozen {
		return fmt.Sprintf("The controller is stopped (pid %d is frozen: SIGSTOP or Ctrl-Z; %s): what follows is what it last saw, and nothing "+
			"is collected or started until the operator resumes it (kill -CONT %d).\n", v.Controller.PID, when, v.Controller.PID)
	}
	return fmt.Sprintf("No controller is running (%s): what follows is what it last saw, and nothing is collected or started "+
		"until one runs. Next: start {project: %q} resumes it and collects what finished (or status with refresh: true asks the nodes now).\n",
		when, v.Project)
}

// refreshText says what the nodes answered (status with refresh: true):
// the tasks whose node says otherwise than the database.
func refreshText(r *readmodel.RefreshView, f fence) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, n := range r.Nodes {
		if n.Error != "" {
			b.WriteString(f.wrap("Node "+n.Name+" could not be asked", termtext.Clean(firstLine(n.Error))))
		}
	}
	var differ []string
	for _, t := range r.Tasks {
		if t.Differs {
			differ = append(differ, fmt.Sprintf("%s is %s on %s (attempt %d, exit %d) but %s in the database", t.ID, t.OnNode, t.Node, t.Attempt, t.ExitCode, t.Database))
		}
	}
	if len(differ) == 0 {
		b.WriteString("Asked the nodes: they agree with the database.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "Asked the nodes (nothing recorded until a controller collects): %s.\n", strings.Join(differ, "; "))
	return b.String()
}

// reportSummary is a report's outcome in a few lines; the tasks' errors
// and the problem are fenced with f.
func reportSummary(r *readmodel.Report, f fence) string {
	t := r.Totals
	var b strings.Builder
	fmt.Fprintf(&b, "%s run %d: %s (phase %s). %d task(s): %d completed, %d failed; %d attempt(s); %s; $%.4f; tokens %d in, %d out.\n",
		r.Project, r.Run, r.Result, r.Phase, t.Tasks, t.Completed, t.Failed, t.Attempts,
		(time.Duration(t.WallSeconds * float64(time.Second))).Round(time.Second/10), t.CostUSD, t.TokensIn, t.TokensOut)
	var views []readmodel.TaskView
	for _, task := range r.Tasks {
		views = append(views, task.TaskView)
	}
	lines, errs := failedTasks(views)
	b.WriteString(lines)
	b.WriteString(f.wrap("Their errors", errs))
	b.WriteString(f.wrap("The problem", termtext.Clean(r.Problem)))
	if r.Final != "" {
		fmt.Fprintf(&b, "Final tree: %s\n", r.Final)
	}
	q := fmt.Sprintf("{project: %q}", r.Project)
	switch r.Result {
	case domain.ResultPassed:
		b.WriteString("Passed: the outputs are under runs/" + r.Project + "/ in the dispatch home.\n")
	case "running":
		fmt.Fprintf(&b, "Still running. Next: status %s until its phase is done.\n", q)
	default:
		fmt.Fprintf(&b, "Next: logs of a failed task (its id); retry its ID, or fix its spec and start %s again.\n", q)
	}
	return b.String()
}

// eventsSummary says how many events an answer holds, the next cursor,
// and the last few of them, fenced with f: a message may quote a task.
func eventsSummary(a eventsAnswer, f fence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d event(s) after cursor %d; next_cursor %d", a.Project, len(a.Events), a.Cursor, a.NextCursor)
	if a.More {
		b.WriteString(" (more follow: call events again with it now)")
	} else {
		b.WriteString(" (pass it as cursor to get only newer events)")
	}
	b.WriteString(".\n")
	from := max(0, len(a.Events)-10)
	var list strings.Builder
	for _, v := range a.Events[from:] {
		ev := store.Event{ID: v.ID, Project: v.Project, Task: v.Task, Attempt: v.Attempt, Kind: v.Kind,
			FromStatus: v.From, ToStatus: v.To, Node: v.Node, Message: v.Message}
		ev.Time, _ = time.Parse(time.RFC3339Nano, v.Time)
		fmt.Fprintf(&list, "  #%d %s\n", v.ID, eventText(ev))
	}
	what := "The events"
	if from > 0 {
		what = "The last 10"
	}
	b.WriteString(f.wrap(what+", whose messages may quote tasks", list.String()))
	return b.String()
}

// runsSummary lists a project's last runs, one a line.
func runsSummary(v *readmodel.RunsView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d run(s)", v.Project, len(v.Runs))
	from := max(0, len(v.Runs)-maxListed)
	if from > 0 {
		fmt.Fprintf(&b, "; the last %d", maxListed)
	}
	b.WriteString(":\n")
	for i := len(v.Runs) - 1; i >= from; i-- {
		r := v.Runs[i]
		fmt.Fprintf(&b, "  run %d: %s, by %s, started %s, finished %s; %d task(s) ran, %d reused; $%.4f\n",
			r.Run, r.Result, r.Trigger, localTime(r.StartedAt), localTime(r.FinishedAt), r.TasksRan, r.TasksReused, r.CostUSD)
	}
	b.WriteString("status, report, logs and events take run to read an earlier one.\n")
	return b.String()
}
