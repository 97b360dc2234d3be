package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// troubleLimit is how many ticks in a row one step of a project may fail
// before the controller stops that project with the error as its problem.
// A passing fault (a busy disk, a file being replaced) gets a few tries; a
// lasting one (a full disk, a result it cannot export, damaged options)
// stops its own project, never the tick: the other projects of the home go
// on either way.
const troubleLimit = 3

// troubleKey names one step of one project in Controller.troubles.
func troubleKey(project, step string) string { return project + "\x00" + step }

// decideTrouble says what a failure of a project's step means after fails
// failures of it in a row: try again next tick, or stop the project.
func decideTrouble(fails int) (stop bool) { return fails >= troubleLimit }

// projectTrouble records that step failed for project in this tick. The
// tick goes on with the other projects; after troubleLimit failures in a
// row the project is stopped (running tasks go on and are collected, as
// after `dispatch stop`) with the error as its problem, which status and
// the report show until `dispatch start` resumes it. It returns an error
// only when the stop cannot be recorded, when ctx is done, or when the
// error is the database's (busy or locked: every project's trouble, which
// fails the tick, tried again at the next, and stops no project).
func (c *Controller) projectTrouble(ctx context.Context, project, step string, err error) error {
	if ctx.Err() != nil || store.IsBusy(err) {
		return err
	}
	k := troubleKey(project, step)
	c.troubles[k]++
	fails := c.troubles[k]
	if !decideTrouble(fails) {
		c.log.Warn("project step failed; trying again next tick", keyProject, project, "step", step, "failures", fails, "err", err)
		return nil
	}
	delete(c.troubles, k)
	problem := fmt.Sprintf("%s failed %d times in a row: %v", step, fails, err)
	c.log.Error("project stopped by an error of its own; the other projects go on", keyProject, project, "problem", problem)
	return c.st.Update(ctx, func(tx *store.Tx) error {
		return tx.SetProject(ctx, project, store.ProjectPatch{State: new(domain.ProjectStopped), Problem: new(problem)},
			"stopped: "+problem+"; fix it, then dispatch start "+project+" resumes")
	})
}

// stepRead names the reading of a project's tasks in its problem.
const stepRead = "reading its tasks"

// leaveOut takes the projects whose rows did not read back (damaged, by
// name) out of the tick's active projects and served names, and records
// each one's trouble: an active one is stopped after troubleLimit ticks in
// a row; one already stopped (served for its attempts) is only logged.
func (c *Controller) leaveOut(ctx context.Context, projects []domain.Project, names []string, damaged map[string]error) ([]domain.Project, []string, error) {
	names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return damaged[n] != nil })
	var kept []domain.Project
	active := map[string]bool{}
	for _, p := range projects {
		if damaged[p.Name] != nil {
			active[p.Name] = true
		} else {
			kept = append(kept, p)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(damaged)) {
		if !active[name] {
			c.log.Warn("a stopped project's tasks do not read back; its attempts are left alone", keyProject, name, "err", damaged[name])
			continue
		}
		if err := c.projectTrouble(ctx, name, stepRead, damaged[name]); err != nil {
			return kept, names, err
		}
	}
	for _, p := range kept {
		c.projectWentOn(p.Name, stepRead)
	}
	return kept, names, nil
}

// projectWentOn clears the failures of a project's step that succeeded.
func (c *Controller) projectWentOn(project, step string) {
	delete(c.troubles, troubleKey(project, step))
}
