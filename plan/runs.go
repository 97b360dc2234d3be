package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/internal/filetree"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// Numbered runs (issue 14). `dispatch start` of a finished project, or a
// schedule, begins run N+1: run N is archived (database: store.BeginRun;
// disk: runs/<project>/run-N/), and each author task either reuses its
// result, when nothing it ran from changed, or runs again, with the reason.

// taskReason is why a task of a new run runs again.
type taskReason struct {
	ID, Reason string
}

// newRun archives the finished run of p and begins the next, deciding task
// by task what is reused. old is the project's row, have its tasks.
func newRun(ctx context.Context, st *store.Store, cfg *nodes.Config, homeDir string, p *spec.Project, so control.StartOptions,
	opts domain.ProjectOptions, options string, old domain.Project, have map[string]domain.Task) (SyncResult, error) {
	res := SyncResult{PrevRun: old.Run, PrevResult: old.Result, Run: old.Run + 1}
	attempts, err := st.Attempts(ctx, p.Name, "")
	if err != nil {
		return res, err
	}
	attemptOf := map[attemptKey]domain.Attempt{}
	for _, r := range attempts {
		attemptOf[attemptKey{r.Task, r.Attempt}] = r
	}
	author, cands, inSpecs := reuseCandidates(cfg, p, opts, old, have, attemptOf)
	fresh := ""
	switch {
	case so.Fresh && (so.Trigger == control.TriggerSchedule || so.Trigger == control.TriggerCatchUp):
		fresh = "a scheduled run runs every task afresh (schedule: reuse: true reuses unchanged ones)"
	case so.Fresh:
		fresh = "--fresh"
	}
	decisions := decideReuse(cands, fresh)

	var removed, phase []string
	for id := range have {
		switch {
		case domain.IsPhaseID(id):
			phase = append(phase, id)
		case !inSpecs[id]:
			removed = append(removed, id)
		}
	}
	sort.Strings(removed)
	sort.Strings(phase)
	reused := map[string]int{}
	for _, c := range cands {
		if d := decisions[c.ID]; d.Reuse {
			reused[c.ID] = c.FromRun
			res.Reused = append(res.Reused, c.ID)
		} else {
			res.Reasons = append(res.Reasons, taskReason{ID: c.ID, Reason: d.Reason})
		}
	}
	// Nothing to run and the last run passed: the new run is the same
	// result, phase included, and ends at once.
	res.AllReused = len(res.Reasons) == 0 && len(removed) == 0 && len(cands) > 0 && old.Result == domain.ResultPassed &&
		samePhase(old, opts)
	if res.AllReused {
		for _, id := range phase {
			reused[id] = attemptOf[attemptKey{id, have[id].Attempt}].Run
		}
	}

	// The disk first: archiving is done again, harmlessly, by a start
	// after a crash in between.
	if err := archiveRunDir(home.RunsDir(homeDir, p.Name), old.Run, reused, have, res.AllReused); err != nil {
		return res, fmt.Errorf("archive run %d of %s: %w", old.Run, p.Name, err)
	}
	crashpoint.At(crashpoint.AfterArchive)
	plan := runPlan{options: options, author: author, cands: cands, decisions: decisions, removed: removed, phase: phase, reused: reused, have: have,
		snapshot: func(id string) ([]byte, error) { return p.Snapshot(p.Task(id)) }}
	if err := st.Update(ctx, func(tx *store.Tx) error { return writeRun(ctx, tx, p.Name, opts, old, plan, &res) }); err != nil || !res.AllReused {
		return res, err
	}
	r, err := readmodel.BuildReport(ctx, st, cfg, homeDir, p.Name, st.Now())
	if err != nil {
		return res, err
	}
	_, err = readmodel.WriteReport(r, homeDir)
	return res, err
}

// attemptKey names an attempt of a task.
type attemptKey struct {
	task    string
	attempt int
}

// reuseCandidates are the project's author tasks as the new run makes
// them, and each one as decideReuse weighs it: new, or what its last
// attempt ran (attemptOf) against what it would run now; inSpecs names
// the tasks the specs hold.
func reuseCandidates(cfg *nodes.Config, p *spec.Project, opts domain.ProjectOptions, old domain.Project, have map[string]domain.Task,
	attemptOf map[attemptKey]domain.Attempt) (author []domain.Task, cands []reuseCandidate, inSpecs map[string]bool) {
	inSpecs = map[string]bool{}
	for _, t := range p.Tasks {
		if domain.IsPhaseID(t.ID) {
			continue
		}
		nt := storeTask(p, t, cfg)
		if p.Config.Base != "" {
			nt.BaseDir = filepath.Join(p.Dir, p.Config.Base)
		}
		if opts.Repo != nil {
			nt.BaseCommit = opts.Repo.Commit
		}
		author = append(author, nt)
		inSpecs[t.ID] = true
		c := reuseCandidate{ID: t.ID, DependsOn: nt.DependsOn}
		o, ok := have[t.ID]
		if !ok {
			c.New = true
			cands = append(cands, c)
			continue
		}
		r := attemptOf[attemptKey{o.ID, o.Attempt}]
		c.Status, c.FromRun = o.Status, old.Run
		if r.Run > 0 {
			c.FromRun = r.Run
		}
		c.Ran, _ = decodeInputs(r.Inputs)
		c.Now = inputs{Spec: nt.SpecHash, Base: baseOfTask(nt, opts), Tool: nt.Tool, Model: nt.Model}
		if c.Ran != nil {
			c.Now.Mode = c.Ran.Mode
			env, known := modeEnvNames(cfg, c.Ran.Mode)
			c.Now.Env, c.ModeGone = env, !known
		}
		c.Result = resultOfTask(o.Attempt, r.Commit)
		cands = append(cands, c)
	}
	return author, cands, inSpecs
}

// runPlan is what a new run writes: its options, the author tasks, each
// one's reuse decision, the tasks removed from the specs, the phase tasks
// of the last run and the runs the reused results come from.
type runPlan struct {
	options   string
	author    []domain.Task
	cands     []reuseCandidate
	decisions map[string]reuseDecision
	removed   []string
	phase     []string
	reused    map[string]int
	have      map[string]domain.Task
	// snapshot reads an author task's snapshot from its spec, for a task
	// written with it (new, or run again); author holds none.
	snapshot func(id string) ([]byte, error)
}

// writeRun begins the new run of project in tx as plan says: new tasks
// inserted, reused ones kept, the others run again, removed ones deleted,
// the phase made afresh, or, when every result is reused, the run passed
// at once.
func writeRun(ctx context.Context, tx *store.Tx, project string, opts domain.ProjectOptions, old domain.Project, plan runPlan, res *SyncResult) error {
	byID := map[string]domain.Task{}
	for _, t := range plan.author {
		byID[t.ID] = t
	}
	msg := fmt.Sprintf("run %d started (%s): %d task(s) to run, %d reused", res.Run, opts.Trigger, len(res.Reasons), len(res.Reused))
	if _, err := tx.BeginRun(ctx, project, plan.options, msg); err != nil {
		return err
	}
	for _, c := range plan.cands {
		nt := byID[c.ID]
		switch {
		case c.New:
			res.Added++
			if err := withSnapshot(&nt, plan.snapshot); err != nil {
				return err
			}
			if err := tx.InsertTask(ctx, nt); err != nil {
				return err
			}
		case plan.decisions[c.ID].Reuse:
			if err := tx.Reuse(ctx, nt, c.FromRun); err != nil {
				return err
			}
		default:
			if err := withSnapshot(&nt, plan.snapshot); err != nil {
				return err
			}
			if err := tx.RunAgain(ctx, nt, plan.decisions[c.ID].Reason); err != nil {
				return err
			}
		}
	}
	if len(plan.removed) > 0 {
		if err := tx.DeleteTasks(ctx, project, plan.removed, "no longer in the project's specs"); err != nil {
			return err
		}
	}
	if !res.AllReused {
		if len(plan.phase) > 0 {
			return tx.DeleteTasks(ctx, project, plan.phase, "a new run makes its integration phase afresh")
		}
		return nil
	}
	for _, id := range plan.phase {
		if err := tx.Reuse(ctx, plan.have[id], plan.reused[id]); err != nil {
			return err
		}
	}
	return tx.SetProject(ctx, project, store.ProjectPatch{State: new(domain.ProjectDone), Phase: new(domain.PhaseDone),
		Result: new(domain.ResultPassed), FinalCommit: new(old.FinalCommit), FinishedAt: new(tx.Now())},
		fmt.Sprintf("nothing changed since run %d: every result reused; run %d passed", res.PrevRun, res.Run))
}

// withSnapshot sets t's snapshot from read.
func withSnapshot(t *domain.Task, read func(id string) ([]byte, error)) error {
	snap, err := read(t.ID)
	if err != nil {
		return err
	}
	t.Snapshot = snap
	return nil
}

// archiveRunDir keeps what run n left in dir (runs/<project>/) in
// dir/run-<n>/: its report, merged and final trees, phase specs, and each
// task's output/, task.log and diffstat.txt. A task's attempts/ stay where
// they are: attempt numbers are unique across runs, and `dispatch logs
// --attempt` finds every run's there. What the next run keeps using (the
// reused tasks' files; everything when every task is reused) stays in
// place and the archive gets hard links to it (a copy where there are
// none): those files are only ever replaced whole, never written in place.
// Done again after a crash, it moves or links only what is not archived
// yet, and links back what the first try moved but this one keeps.
func archiveRunDir(dir string, n int, reused map[string]int, tasks map[string]domain.Task, keepAll bool) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	archive := filepath.Join(dir, readmodel.RunDirName(n))
	if err := os.MkdirAll(archive, 0o755); err != nil {
		return err
	}
	// What is here, and what an earlier try of this archive moved away.
	names, err := entryNames(dir, archive)
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasPrefix(name, "run-") || strings.HasPrefix(name, ".") {
			continue
		}
		src, dst := filepath.Join(dir, name), filepath.Join(archive, name)
		// A task's directory, of this run or an earlier one (a task
		// removed since keeps its attempts' logs in place too).
		if _, isTask := tasks[name]; isTask || spec.TaskIDPattern.MatchString(name) {
			if fi, err := os.Lstat(src); err == nil && !fi.IsDir() {
				continue
			}
			_, keep := reused[name]
			if err := archiveTaskDir(src, dst, keep); err != nil {
				return err
			}
			continue
		}
		if err := archiveEntry(src, dst, keepAll); err != nil {
			return err
		}
	}
	return nil
}

// entryNames are the names in either directory, sorted.
func entryNames(dirs ...string) ([]string, error) {
	seen := map[string]bool{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			seen[e.Name()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

func archiveTaskDir(src, dst string, keep bool) error {
	names, err := entryNames(src, dst)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if keep {
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
	}
	for _, name := range names {
		if name == "attempts" || strings.HasSuffix(name, ".linking") {
			continue
		}
		if err := archiveEntry(filepath.Join(src, name), filepath.Join(dst, name), keep); err != nil {
			return err
		}
	}
	return nil
}

// archiveEntry moves src to dst, or, with keep, leaves it and links it
// there (files are only ever replaced whole, never written in place);
// nothing when dst exists already. An archive done again after a crash
// may decide to keep what the first one moved: it is linked back.
func archiveEntry(src, dst string, keep bool) error {
	_, dstErr := os.Lstat(dst)
	_, srcErr := os.Lstat(src)
	switch {
	case dstErr == nil && keep && errors.Is(srcErr, fs.ErrNotExist):
		return linkEntry(dst, src)
	case dstErr == nil || srcErr != nil:
		return nil
	case !keep:
		return os.Rename(src, dst)
	}
	return linkEntry(src, dst)
}

// linkEntry makes dst a copy of src by hard links: a tree, or one file.
func linkEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return linkTree(src, dst)
	case fi.Mode().IsRegular():
		tmp := dst + ".linking"
		os.Remove(tmp)
		if os.Link(src, tmp) != nil {
			if err := filetree.CopyFile(src, tmp); err != nil {
				return err
			}
		}
		return os.Rename(tmp, dst)
	}
	return nil // links and the like are not archived
}

// linkTree makes dst a tree of hard links to src's regular files, built
// beside dst and renamed into place.
func linkTree(src, dst string) error {
	tmp := dst + ".linking"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(tmp, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			if os.Link(p, to) == nil {
				return nil
			}
			// A file system without hard links: a copy.
			return filetree.CopyFile(p, to)
		}
		return nil
	})
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// treeHash is the sha256 of a tree's regular files: paths, exec bits and
// contents (a project's base: tree, for reuse).
func treeHash(dir string) (string, error) {
	var lines []string
	err := filetree.WalkSums(dir, func(rel string, mode fs.FileMode, sum string) {
		lines = append(lines, fmt.Sprintf("%s\x00%o\x00%s", rel, mode.Perm()&0o111, sum))
	})
	if err != nil {
		return "", err
	}
	sort.Strings(lines)
	return sha256Hex([]byte(strings.Join(lines, "\n"))), nil
}

// maxReasonLines bounds the reasons a summary lists (a --fresh run of
// 10,000 tasks would otherwise print 10,000 lines): the events keep all.
const maxReasonLines = 20

// RunSummary says what a start that began a new run decided: the run,
// what runs again and why, what is reused; "" when it began none.
func (r SyncResult) RunSummary(project string) string {
	if r.Run == 0 {
		return ""
	}
	var b strings.Builder
	if r.AllReused {
		fmt.Fprintf(&b, "%s run %d: nothing changed since run %d (%s); every task's result is reused, and run %d passed.\n",
			project, r.Run, r.PrevRun, r.PrevResult, r.Run)
		return b.String()
	}
	fmt.Fprintf(&b, "%s run %d begins (run %d %s): %d task(s) to run, %d reused.\n", project, r.Run, r.PrevRun, r.PrevResult,
		len(r.Reasons), len(r.Reused))
	for i, why := range r.Reasons {
		if i == maxReasonLines {
			fmt.Fprintf(&b, "  … and %d more (dispatch events %s lists every reason)\n", len(r.Reasons)-i, project)
			break
		}
		fmt.Fprintf(&b, "  %s: %s\n", why.ID, why.Reason)
	}
	return b.String()
}

// samePhase reports whether the integration phase of the run that ended
// would be the same now: its switches, and the spec of every phase task
// the author supplies (S99, V01, F01…). Otherwise a new run whose author
// tasks are all reused still runs its phase again.
func samePhase(old domain.Project, now domain.ProjectOptions) bool {
	was, err := old.ParseOptions()
	if err != nil {
		return false
	}
	key := func(o domain.ProjectOptions) string {
		hashes := map[string]string{}
		for id, ov := range o.Overrides {
			hashes[id] = ov.Hash + "\x00" + sha256Hex(ov.Snapshot) + "\x00" + ov.Tool + "\x00" + ov.Model
		}
		b, _ := json.Marshal(map[string]any{"integration": o.Integration, "verification": o.Verification,
			"partial": o.IntegratePartial, "rounds": o.MaxFixRounds, "tool": o.PhaseTool, "overrides": hashes})
		return string(b)
	}
	return key(was) == key(now)
}
