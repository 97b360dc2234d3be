package readmodel

import (
	"context"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// RunsView is `dispatch runs <project> --json`.
type RunsView struct {
	Project string    `json:"project"`
	Runs    []RunView `json:"runs"`
	// Controller is whether a controller runs (set by the caller): a
	// "running" run without one goes on only when one resumes it.
	Controller *ControllerView `json:"controller,omitempty"`
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
	// Trigger is what began the run: start (by hand), schedule, catch-up.
	Trigger string `json:"trigger"`
}

// Runs lists a project's runs, the first first.
func Runs(ctx context.Context, st *store.Store, project string) (*RunsView, error) {
	hist, err := st.RunHistory(ctx, project)
	if err != nil {
		return nil, err
	}
	v := &RunsView{Project: project, Runs: []RunView{}}
	for _, h := range hist {
		p := h.Project
		r := RunView{Run: p.Run, Result: p.Result, StartedAt: jsonTime(p.StartedAt), FinishedAt: jsonTime(p.FinishedAt),
			TasksRan: h.Ran, TasksReused: h.Reused, CostUSD: clampCost(h.CostUSD)}
		if opts, err := p.ParseOptions(); err == nil {
			r.Trigger = opts.Trigger
		}
		if r.Trigger == "" {
			r.Trigger = "start"
		}
		if r.Result == "" {
			r.Result = domain.ResultRunning
			if p.State == domain.ProjectStopped {
				r.Result = domain.ResultStopped
			}
		}
		v.Runs = append(v.Runs, r)
	}
	return v, nil
}
