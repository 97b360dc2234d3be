package prune

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// Pruner prunes the runs of a dispatch home's projects.
type Pruner struct {
	Store  *store.Store
	Config *nodes.Config
	Home   string
	// Nodes removes attempt directories on the nodes; nil: Transports.
	Nodes Nodes
	// afterFiles, when set (tests), is called once a run's files are gone
	// and before its rows go: an error stops the prune there.
	afterFiles func(run int) error
}

// RunReport is what pruning one run removes (or, dry, would remove).
type RunReport struct {
	Run int
	// Unfinished is set for a run an earlier prune began and did not end.
	Unfinished bool
	// Files and Bytes are under runs/: the run's archive and its pruned
	// attempts' logs; Bytes counts what is freed (a file another run
	// still links is counted once, where it stays).
	Files int
	Bytes int64
	// Attempts is how many attempts go: their rows, their logs under
	// runs/ and their directories on the nodes.
	Attempts int
	// Rows is the database rows, by table.
	Rows map[string]int
	// Left is set for a run this prune could not finish (a node did not
	// answer): it stays marked, with what was not removed, for the next.
	Left bool

	paths []string
	nodes map[string][]Attempt
}

// RowCount is how many database rows go.
func (r RunReport) RowCount() int {
	return store.RunPrune{Rows: r.Rows}.RowCount()
}

// Report is what one project's prune did.
type Report struct {
	Project   string
	Retention yamlval.Retention
	Runs      []RunReport
	// Branches are the branches of the operator's repository that go.
	Branches []Branch
	// Spares are the bases whose spare checkouts go from the nodes that
	// ran the runs that go.
	Spares []string
	// Problems are what stopped a run's prune (an unreachable node): the
	// run stays recorded, for the next prune to finish.
	Problems []string
}

// Project prunes the runs of project its retention lets go, and finishes
// what an earlier prune left; with dry it only says what would go.
func (p *Pruner) Project(ctx context.Context, project string, dry bool) (Report, error) {
	rep := Report{Project: project}
	keep, note, err := p.retention(project)
	if err != nil {
		return rep, err
	}
	if note != "" {
		rep.Problems = append(rep.Problems, note)
	}
	rep.Retention = keep
	gone, unfinished, err := p.decide(ctx, project, keep)
	if err != nil || len(gone) == 0 {
		return rep, err
	}
	kept, err := p.Store.TasksKeptOn(ctx, project, gone)
	if err != nil {
		return rep, err
	}
	for _, n := range gone {
		r, err := p.measure(ctx, project, n, gone, kept)
		if err != nil {
			return rep, err
		}
		r.Unfinished = unfinished[n]
		rep.Runs = append(rep.Runs, r)
	}
	if rep.Branches, rep.Spares, err = p.branches(ctx, project, gone); err != nil || dry {
		return rep, err
	}
	if err := p.Store.Update(ctx, func(tx *store.Tx) error { return tx.BeginPrune(ctx, project, gone) }); err != nil {
		return rep, err
	}
	// Before any run's rows go: they say which commits the branches had.
	for _, b := range rep.Branches {
		if err := gitrepo.DeleteRef(ctx, b.Repo, b.Ref, b.Commit); err != nil {
			return rep, fmt.Errorf("delete %s in %s: %w (the runs stay marked; the next prune decides again)", b.Ref, b.Repo, err)
		}
	}
	down := map[string]bool{} // nodes that failed in this prune: not tried again
	for i := range rep.Runs {
		if err := p.pruneRun(ctx, project, &rep.Runs[i], gone, rep.Spares, down); err != nil {
			var nf *nodeFailure
			if !errors.As(err, &nf) {
				return rep, err
			}
			rep.Runs[i].Left = true
			rep.Problems = append(rep.Problems, err.Error())
		}
	}
	return rep, nil
}

// retention is project's retention: its project.yaml's, else nodes.yaml's
// (also for a project whose specs are gone). A project whose specs do not
// load keeps every run, with a note saying why.
func (p *Pruner) retention(project string) (keep yamlval.Retention, note string, err error) {
	ctl := p.Config.Controller.Retention
	sp, err := spec.Load(home.SpecsDir(p.Home), project)
	var unknown *spec.UnknownProjectError
	var errs spec.Errors
	switch {
	case errors.As(err, &unknown):
		return ctl, "", nil
	case errors.As(err, &errs):
		return yamlval.Retention{}, fmt.Sprintf("%s: its specs do not load (`dispatch validate %s`): no run pruned but those an earlier prune began", project, project), nil
	case err != nil:
		return ctl, "", err
	}
	return Effective(sp.Config.Retention, ctl), "", nil
}

// decide returns the runs of project that go, in order: those retention
// lets go and those an earlier prune began (unfinished).
func (p *Pruner) decide(ctx context.Context, project string, keep yamlval.Retention) (gone []int, unfinished map[int]bool, err error) {
	cur, err := p.Store.Project(ctx, project)
	if err != nil {
		return nil, nil, err
	}
	hist, err := p.Store.RunHistory(ctx, project)
	if err != nil {
		return nil, nil, err
	}
	states, err := p.Store.PruneStates(ctx, project)
	if err != nil {
		return nil, nil, err
	}
	scheds, err := p.Store.Schedules(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The run a schedule began and has not read the end of yet (serve was
	// not running when it ended) stays, as one not ended: its result is
	// what the schedule waits for.
	awaited := 0
	for _, s := range scheds {
		if s.Project == project && s.LastResult == "" {
			awaited = s.LastRun
		}
	}
	runs := make([]Run, 0, len(hist))
	for _, h := range hist {
		at := h.Project.FinishedAt
		if at.IsZero() {
			at = h.Project.StartedAt
		}
		runs = append(runs, Run{N: h.Project.Run, Current: h.Project.Run == cur.Run,
			Active: h.Project.State == domain.ProjectActive || h.Project.Run == awaited, At: at})
	}
	gone = Decide(runs, keep, p.Store.Now())
	unfinished = map[int]bool{}
	for n, s := range states {
		if s == store.PruneIntent && n != cur.Run {
			unfinished[n] = true
			gone = append(gone, n)
		}
	}
	sort.Ints(gone)
	return slices.Compact(gone), unfinished, nil
}

// measure reads what pruning run n removes: rows, files under runs/ and
// the nodes' attempt directories.
func (p *Pruner) measure(ctx context.Context, project string, n int, gone []int, kept map[[2]string]bool) (RunReport, error) {
	pr, err := p.Store.PruneOf(ctx, project, n, gone)
	if err != nil {
		return RunReport{}, err
	}
	r := RunReport{Run: n, Rows: pr.Rows, nodes: map[string][]Attempt{}}
	runs := home.RunsDir(p.Home, project)
	for _, a := range pr.Attempts {
		r.paths = append(r.paths, filepath.Join(runs, a.Task, "attempts", strconv.Itoa(a.Attempt)))
		r.nodes[a.Node] = append(r.nodes[a.Node], Attempt{Task: a.Task, Attempt: a.Attempt, TaskDir: !kept[[2]string{a.Task, a.Node}]})
		r.Attempts++
	}
	r.paths = append(r.paths, filepath.Join(runs, readmodel.RunDirName(n)))
	r.Files, r.Bytes, err = sizeOf(r.paths)
	return r, err
}

// sizeOf counts the regular files under paths and the bytes removing
// them all frees: a file with several names (a collected task.log has one
// under attempts/<N>/ and one beside output/) frees its bytes only when
// every one of its names is among them.
func sizeOf(paths []string) (files int, bytes int64, err error) {
	links := map[fileID]*linkCount{}
	for _, path := range paths {
		f, b, err := treeSize(path, links)
		if err != nil {
			return files, bytes, err
		}
		files += f
		bytes += b
	}
	for _, l := range links {
		if l.seen >= l.nlink {
			bytes += l.size
		}
	}
	return files, bytes, nil
}

// fileID names a file with several names (hard links); linkCount is how
// many of its names a prune removes, of nlink, and its size.
type (
	fileID    struct{ dev, ino uint64 }
	linkCount struct {
		seen, nlink uint64
		size        int64
	}
)

// branches reads the runs' branches and the operator's repositories and
// decides which branches go with the runs gone (DecideBranches), and
// which bases' spare checkouts (DecideSpares). A repository no longer
// there has nothing to remove; a branch checked out in a worktree stays.
func (p *Pruner) branches(ctx context.Context, project string, gone []int) (out []Branch, spares []string, err error) {
	recs, err := p.Store.Branches(ctx, project)
	if err != nil {
		return nil, nil, err
	}
	var runs []BranchRun
	var repos []string
	for _, rec := range recs {
		run := BranchRun{N: rec.Run, Final: rec.Final, Tasks: rec.Tasks, Bases: rec.Bases}
		opts, err := domain.Project{Name: project, Options: rec.Options}.ParseOptions()
		if err == nil && opts.Repo != nil {
			run.Repo = opts.Repo.Dir
			run.Bases = append(run.Bases, opts.Repo.Commit)
		}
		if slices.Contains(gone, rec.Run) && run.Repo != "" && !slices.Contains(repos, run.Repo) {
			repos = append(repos, run.Repo)
		}
		runs = append(runs, run)
	}
	sort.Strings(repos)
	for _, repo := range repos {
		if _, err := os.Stat(repo); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		refs, err := gitrepo.Refs(ctx, repo, gitrepo.RefPrefix+project+"/")
		if err != nil {
			return nil, nil, fmt.Errorf("read the branches of %s in %s: %w", project, repo, err)
		}
		busy, err := gitrepo.CheckedOut(ctx, repo)
		if err != nil {
			return nil, nil, fmt.Errorf("read the worktrees of %s: %w", repo, err)
		}
		for ref := range busy {
			delete(refs, ref)
		}
		out = append(out, DecideBranches(project, repo, runs, gone, refs)...)
	}
	return out, DecideSpares(runs, gone), nil
}

// nodeFailure is a node whose directories could not be removed: the run
// stays recorded for the next prune.
type nodeFailure struct{ msg string }

func (e *nodeFailure) Error() string { return e.msg }

// pruneRun removes run r's node directories, then its files, then its
// rows (recording it pruned): each step can be done again. A node that
// fails is recorded in down and not tried again for a later run: that run
// too stays recorded, with its files, for the next prune.
func (p *Pruner) pruneRun(ctx context.Context, project string, r *RunReport, gone []int, spares []string, down map[string]bool) error {
	remover := p.Nodes
	if remover == nil {
		remover = Transports{Config: p.Config}
	}
	names := make([]string, 0, len(r.nodes))
	for name := range r.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n, ok := p.Config.Node(name)
		if !ok {
			continue // a node no longer in nodes.yaml: nothing to reach
		}
		what := "failed earlier in this prune"
		if !down[name] {
			_, err := remover.Remove(ctx, n, project, r.nodes[name], spares)
			if err == nil {
				continue
			}
			down[name] = true
			what = err.Error()
		}
		return &nodeFailure{msg: fmt.Sprintf("run %d of %s: node %s: %s; the run stays marked for pruning: once %s answers (`dispatch nodes check %s`), `dispatch prune %s` finishes it",
			r.Run, project, name, what, name, name, project)}
	}
	for _, path := range r.paths {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("prune run %d of %s: %w", r.Run, project, err)
		}
	}
	crashpoint.At(crashpoint.MidPrune)
	if p.afterFiles != nil {
		if err := p.afterFiles(r.Run); err != nil {
			return err
		}
	}
	return p.Store.Update(ctx, func(tx *store.Tx) error { return tx.PruneRun(ctx, project, r.Run, gone) })
}

// treeSize counts the regular files under path and the bytes removing
// them frees; a file with other links is counted in links instead (its
// bytes are freed when every one of its names goes: a collected task.log
// has one under attempts/<N>/ and one beside output/); nothing for a
// path that does not exist.
func treeSize(path string, links map[fileID]*linkCount) (files int, bytes int64, err error) {
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		files++
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Nlink <= 1 {
			bytes += fi.Size()
			return nil
		}
		id := fileID{uint64(st.Dev), st.Ino}
		l := links[id]
		if l == nil {
			l = &linkCount{nlink: uint64(st.Nlink), size: fi.Size()}
			links[id] = l
		}
		l.seen++
		return nil
	})
	return files, bytes, err
}

// All prunes every project of the store (see Project).
func (p *Pruner) All(ctx context.Context, dry bool) ([]Report, error) {
	ps, err := p.Store.Projects(ctx)
	if err != nil {
		return nil, err
	}
	var out []Report
	for _, pr := range ps {
		r, err := p.Project(ctx, pr.Name, dry)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
