package controller

import (
	"context"
	"fmt"

	"github.com/dispatch-tool/dispatch/store"
)

// finishProjects ends every active project whose tasks are all finished and
// whose completed outputs are collected: it writes report.md and records the
// result.
func (c *Controller) finishProjects(ctx context.Context, projects []store.Project) ([]string, error) {
	var done []string
	for _, p := range projects {
		tasks, err := c.st.Tasks(ctx, p.Name)
		if err != nil {
			return done, err
		}
		runs, err := c.st.Runs(ctx, p.Name, "")
		if err != nil {
			return done, err
		}
		collected := map[string]bool{}
		for _, r := range runs {
			if !r.CollectedAt.IsZero() {
				collected[fmt.Sprintf("%s#%d", r.Task, r.Attempt)] = true
			}
		}
		finished, result := true, ResultPassed
		for _, t := range tasks {
			if !store.Terminal(t.Status) {
				finished = false
				break
			}
			if t.Status == store.Completed && !collected[fmt.Sprintf("%s#%d", t.ID, t.Attempt)] {
				finished = false
				break
			}
			if t.Status != store.Completed {
				result = ResultFailed
			}
		}
		if !finished {
			continue
		}
		// The report is written before the project is marked done, so a
		// controller killed in between writes it again on the next start.
		r, err := BuildReport(ctx, c.st, c.cfg, c.opts.Home, p.Name, c.now())
		if err != nil {
			return done, err
		}
		r.Result, r.Phase = result, PhaseDone
		if _, err := WriteReport(r, c.opts.Home); err != nil {
			return done, fmt.Errorf("write report of %s: %w", p.Name, err)
		}
		crashPoint(CrashBeforeFinish)
		if err := c.st.Update(ctx, func(tx *store.Tx) error {
			return tx.SetProject(ctx, p.Name, store.Set{"state": store.ProjectDone, "phase": PhaseDone,
				"result": result, "finished_at": tx.Now()}, "project finished: "+result)
		}); err != nil {
			return done, err
		}
		done = append(done, p.Name)
	}
	return done, nil
}
