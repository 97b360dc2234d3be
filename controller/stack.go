package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/internal/textfence"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// Stacked work (issue 33 item 1): in a git project a task with depends_on
// starts on its dependencies' results merged onto the base, computed in
// the operator's repository before the launch (stackLaunches). The start
// is recorded on the attempt (its result must be one commit on it) and
// shipped to the node as a base is (shipBases: what the node's repository
// lacks). A conflict between the results is committed with git's markers
// and listed in the task's prompt, or fails the task (on_conflict: fail).

// stacked reports whether t, an author task of a git project with
// dependencies, starts on their results (not start_from: base). Like a
// task receiving outputs, it waits for their collection.
func stacked(t domain.Task) bool {
	return t.BaseCommit != "" && !domain.IsPhaseID(t.ID) && len(t.DependsOn) > 0 && t.StartFrom != domain.StartBase
}

// waitsForCollection reports whether t starts only once its dependencies'
// results are collected, not only completed (store's runnableSQL says the
// same).
func waitsForCollection(t domain.Task) bool { return receivesOutputs(t) || stacked(t) }

// stackStart is where a stacked attempt starts: the commit, and the
// conflicts git met making it.
type stackStart struct {
	commit    string
	conflicts []gitrepo.Conflict
}

// stackBranches lists the results t is stacked on: each dependency's
// current commit, counted from where that attempt started, in dependency
// order then ID (mergeOrder over the dependencies). tasks are the
// project's tasks and runs their attempts.
func stackBranches(t domain.Task, tasks []domain.Task, runs []domain.Attempt) ([]gitrepo.TaskBranch, error) {
	var deps []domain.Task
	for _, d := range tasks {
		if slices.Contains(t.DependsOn, d.ID) {
			deps = append(deps, d)
		}
	}
	if len(deps) != len(slices.Compact(slices.Sorted(slices.Values(t.DependsOn)))) {
		return nil, fmt.Errorf("%s depends on a task the project does not have (%s)", t.ID, strings.Join(t.DependsOn, ", "))
	}
	var out []gitrepo.TaskBranch
	for _, d := range mergeOrder(deps) {
		commit := attemptCommit(d, runs)
		if d.Status != domain.Completed || commit == "" {
			return nil, fmt.Errorf("dependency %s has no result commit (%s)", d.ID, d.Status)
		}
		out = append(out, gitrepo.TaskBranch{ID: d.ID, Commit: commit, Base: attemptBase(d, runs)})
	}
	return out, nil
}

// attemptBase is the commit t's current attempt started on: the stacked
// start it recorded, else t's base commit.
func attemptBase(t domain.Task, runs []domain.Attempt) string {
	for _, r := range runs {
		if r.Task == t.ID && r.Attempt == t.Attempt && r.BaseCommit != "" {
			return r.BaseCommit
		}
	}
	return t.BaseCommit
}

// startOf is the commit attempt r of t started on.
func startOf(r domain.Attempt, t domain.Task) string {
	if r.BaseCommit != "" {
		return r.BaseCommit
	}
	return t.BaseCommit
}

// stackLaunches computes the start of each stacked task among outs (one
// read of each project's tasks and attempts), records it on the attempt,
// and sets out.start; a task whose start cannot be made fails to start,
// one with on_conflict: fail whose dependencies conflict fails for good.
func (c *Controller) stackLaunches(ctx context.Context, outs []launchOutcome) {
	type projectRead struct {
		tasks []domain.Task
		runs  []domain.Attempt
		repo  string
		err   error
	}
	reads := map[string]*projectRead{}
	var recorded []*launchOutcome
	for i := range outs {
		o := &outs[i]
		t := o.claim.task
		if !stacked(t) {
			continue
		}
		pr := reads[t.Project]
		if pr == nil {
			pr = &projectRead{}
			pr.tasks, pr.runs, pr.repo, pr.err = c.readStack(ctx, t.Project)
			reads[t.Project] = pr
		}
		if pr.err != nil {
			o.err = pr.err
			continue
		}
		start, err := c.stackStart(ctx, t, pr.tasks, pr.runs, pr.repo)
		if err != nil {
			o.err = fmt.Errorf("stack %s on its dependencies: %w", t.ID, err)
			continue
		}
		if len(start.conflicts) > 0 && t.OnConflict == domain.ConflictFail {
			o.err, o.noRetry, o.class = onConflictFailed(t, start.conflicts), true, wire.ClassStartPermanent
			continue
		}
		o.start = start
		recorded = append(recorded, o)
	}
	if len(recorded) == 0 {
		return
	}
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		for _, o := range recorded {
			t := o.claim.task
			if err := tx.SetAttempt(ctx, t.Project, t.ID, t.Attempt, store.AttemptPatch{BaseCommit: new(o.start.commit)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, o := range recorded {
			o.err, o.start = fmt.Errorf("record where %s starts: %w", o.claim.task.ID, err), nil
		}
	}
}

// readStack reads what stacking a task of project needs: its tasks, their
// attempts and its repository.
func (c *Controller) readStack(ctx context.Context, project string) ([]domain.Task, []domain.Attempt, string, error) {
	p, err := c.st.Project(ctx, project)
	if err != nil {
		return nil, nil, "", err
	}
	opts, err := p.ParseOptions()
	if err != nil {
		return nil, nil, "", err
	}
	if opts.Repo == nil {
		return nil, nil, "", fmt.Errorf("project %s has no repository recorded; start it again", project)
	}
	tasks, err := c.st.Tasks(ctx, project)
	if err != nil {
		return nil, nil, "", err
	}
	runs, err := c.st.Attempts(ctx, project, "")
	return tasks, runs, opts.Repo.Dir, err
}

// stackStart merges t's dependencies' results onto its base in repo.
func (c *Controller) stackStart(ctx context.Context, t domain.Task, tasks []domain.Task, runs []domain.Attempt, repo string) (*stackStart, error) {
	branches, err := stackBranches(t, tasks, runs)
	if err != nil {
		return nil, err
	}
	m, err := gitrepo.Stack(ctx, repo, t.BaseCommit, branches)
	if err != nil {
		return nil, err
	}
	return &stackStart{commit: m.Commit, conflicts: m.Conflicts}, nil
}

// onConflictFailed is the error of a task with on_conflict: fail whose
// dependencies' results conflict.
func onConflictFailed(t domain.Task, conflicts []gitrepo.Conflict) error {
	return fmt.Errorf("on_conflict: fail, and the results of its dependencies conflict: %s; "+
		"fix: resolve the conflict in one of them (dispatch retry %s <ID>) or remove on_conflict: fail to start on git's conflict markers",
		describeConflicts(conflicts), t.Project)
}

// describeConflicts says each conflict on one line: "a.txt (S01, S02)".
func describeConflicts(conflicts []gitrepo.Conflict) string {
	var parts []string
	for _, c := range conflicts {
		parts = append(parts, fmt.Sprintf("%s (%s)", textfence.Path(c.Path), strings.Join(c.Tasks, ", ")))
	}
	return strings.Join(parts, ", ")
}

// conflictSection is what the prompt of a task stacked on conflicting
// results gains: the paths and the tasks, as the integration prompt lists
// them. A shell task's spec is its script, never added to: the merge
// commit it starts on names the paths ("Merge S02 (conflicts: a.txt)").
func conflictSection(tool string, conflicts []gitrepo.Conflict) []byte {
	if len(conflicts) == 0 || tool == policy.ToolShell {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n## Conflicts between the tasks this one depends on\n\n")
	b.WriteString("git could not merge these files of your dependencies' results: they hold git's conflict\n")
	b.WriteString("markers (`<<<<<<<`, `=======`, `>>>>>>>`) around the versions of the tasks named.\n")
	b.WriteString("Resolve each, keep what both intended, and remove every marker.\n\n")
	for _, c := range conflicts {
		fmt.Fprintf(&b, "- `%s`: %s\n", textfence.Path(c.Path), strings.Join(c.Tasks, ", "))
	}
	return []byte(b.String())
}
