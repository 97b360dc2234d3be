package controller

import (
	"context"
	"fmt"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// stepAdvance names the phase step of a project in its problem.
const stepAdvance = "its integration phase"

// finishProjects advances every active project through its phases and
// returns those that finished in this tick. An error of one project's
// phase is that project's trouble: the others are advanced all the same.
func (c *Controller) finishProjects(ctx context.Context, projects []domain.Project) ([]string, error) {
	var done []string
	for _, p := range projects {
		finished, err := c.advance(ctx, p)
		if err != nil {
			if err := c.projectTrouble(ctx, p.Name, stepAdvance, err); err != nil {
				return done, err
			}
			continue
		}
		c.projectWentOn(p.Name, stepAdvance)
		if finished {
			done = append(done, p.Name)
		}
	}
	return done, nil
}

// finish ends a project: it writes report.md, then records the result and
// the phase done. The report comes first, so a controller killed in between
// writes it again on the next start.
func (c *Controller) finish(ctx context.Context, p domain.Project, result, note string) error {
	if note != "" {
		if err := c.st.Update(ctx, func(tx *store.Tx) error {
			return tx.Event(ctx, store.Event{Project: p.Name, Kind: "phase", Message: note})
		}); err != nil {
			return err
		}
	}
	r, err := readmodel.BuildReport(ctx, c.st, c.config(), c.opts.Home, p.Name, c.now())
	if err != nil {
		return err
	}
	r.Result, r.Phase = result, domain.PhaseDone
	if _, err := readmodel.WriteReport(r, c.opts.Home); err != nil {
		return fmt.Errorf("write report of %s: %w", p.Name, err)
	}
	crashpoint.At(crashpoint.BeforeFinish)
	if err := c.st.Update(ctx, func(tx *store.Tx) error {
		return tx.SetProject(ctx, p.Name, store.ProjectPatch{State: new(domain.ProjectDone), Phase: new(domain.PhaseDone), Result: new(result), FinishedAt: new(tx.Now())}, "project finished: "+result)
	}); err != nil {
		return err
	}
	c.sendNotice(ctx, p.Name, notify.RunFinished, result, note)
	if result != domain.ResultPassed {
		c.sendNotice(ctx, p.Name, notify.RunFailed, result, note)
	}
	return nil
}
