package readmodel

import (
	"context"

	"github.com/dispatch-tool/dispatch/store"
)

// RunsView is `dispatch runs <project> --json`.
type RunsView struct {
	Project string    `json:"project"`
	Runs    []RunView `json:"runs"`
}

// RunView is one run of a project: when it started and ended, its result
// (running, stopped, passed, failed), how many of its tasks ran and were
// reused from an earlier run, and what it cost.
type RunView struct {
	Run         int     `json:"run"`
	Result      string  `json:"result"`
	StartedAt   string  `json:"started_at"`
	FinishedAt  string  `json:"finished_at"`
	TasksRan    int     `json:"tasks_ran"`
	TasksReused int     `json:"tasks_reused"`
	CostUSD     float64 `json:"cost_usd"`
}

// Runs lists a project's runs. A project runs once today (a finished one
// runs again only for new tasks, within the same run), so the list has
// one entry; numbered runs extend it.
func Runs(ctx context.Context, st *store.Store, project string) (*RunsView, error) {
	p, err := st.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		return nil, err
	}
	usd, _, err := st.Spent(ctx, project)
	if err != nil {
		return nil, err
	}
	r := RunView{Run: 1, Result: p.Result, StartedAt: jsonTime(p.StartedAt), FinishedAt: jsonTime(p.FinishedAt), CostUSD: usd}
	if r.Result == "" {
		r.Result = store.ResultRunning
		if p.State == store.ProjectStopped {
			r.Result = store.ResultStopped
		}
	}
	for _, t := range tasks {
		if t.Attempt > 0 {
			r.TasksRan++
		}
	}
	return &RunsView{Project: project, Runs: []RunView{r}}, nil
}
