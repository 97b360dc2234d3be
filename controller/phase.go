package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/filetree"
	"github.com/dispatch-tool/dispatch/internal/textfence"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

//go:embed templates/*.md
var templateFS embed.FS

// templates are the readable sources of the generated S99, V and F specs.
// A path in them is a task's to name: {{path .}} quotes it (see
// textfence.Path).
var templates = template.Must(template.New("").Funcs(template.FuncMap{"path": textfence.Path}).ParseFS(templateFS, "templates/*.md"))

// advance moves a project through its phases (SPEC §8) once the tasks of the
// current phase are finished and collected, and finishes it at the end.
func (c *Controller) advance(ctx context.Context, p domain.Project) (bool, error) {
	in, ready, err := c.readPhase(ctx, p)
	if err != nil || !ready {
		return false, err
	}
	return c.doPhase(ctx, p, in, decidePhase(in))
}

// phaseInput is what the phase machine decides over for one project whose
// tasks have all ended and been collected.
type phaseInput struct {
	phase domain.Phase
	opts  domain.ProjectOptions
	// author are the author tasks (all ended); allCompleted says whether
	// every one completed.
	author       []domain.Task
	allCompleted bool
	// phaseTasks are S99, the V and F rounds by ID; done says whether one
	// ended (and, completed, was collected).
	phaseTasks map[string]domain.Task
	done       func(domain.Task) bool
	// budget says why the budget stops a new phase task ("": it does not).
	budget string
	// verdict is the last verification's, once it ended (phase
	// verification); lastIssues those of the last recorded verdict (phase
	// fix).
	verdict    *store.Verdict
	lastIssues []string
	// runsDir and runs locate the phase tasks' results.
	runsDir string
	runs    []domain.Attempt
	// gates are the project gate's runs on the results of S99 and the fix
	// rounds, by task ID (their current attempts'); nil without a
	// project gate.
	gates map[string]*store.GateRun
}

// gateOf is the project gate's run on t's result: nil when the project
// has no project gate; a failed run with why when the result was not
// gated (its attempt ended without a gate result).
func (in phaseInput) gateOf(t domain.Task) *store.GateRun {
	if in.gates == nil {
		return nil
	}
	if g := in.gates[t.ID]; g != nil {
		return g
	}
	return &store.GateRun{Task: t.ID, Attempt: t.Attempt, Command: in.opts.GateFor(t.ID), Error: "the result of " + t.ID + " was not gated"}
}

// gateIssues is what a fix round is told of a failed project gate.
func gateIssues(g *store.GateRun) []string {
	tail := strings.TrimRight(g.OutputTail, "\n")
	fence := "```"
	for strings.Contains(tail, fence) {
		fence += "`"
	}
	return []string{fmt.Sprintf("The project's gate `%s` failed on the result of %s (%s). The end of its output:\n\n%s\n%s\n%s",
		g.Command, g.Task, gateWhy(*g), fence, tail, fence)}
}

// phaseAction is what the phase machine does next.
type phaseAction int

const (
	phaseWait      phaseAction = iota // nothing yet
	phaseFinish                       // record final (when set), finish with result and note
	phaseBudget                       // the budget stops it: say so, finish failed
	phaseIntegrate                    // merge the author tasks' results, start S99
	phaseVerify                       // start verification round on tree, with issues
	phaseFix                          // start fix round on tree, with issues
)

// phaseStep is the phase machine's decision. verdict, when set, is
// recorded first.
type phaseStep struct {
	action       phaseAction
	result, note string
	final        *taskBase
	round        int
	tree         taskBase
	issues       []string
	verdict      *store.Verdict
	verifier     domain.Task // the verification whose verdict is recorded
	// gateFix is set on a fix round that follows a failed project gate
	// (its issues are the gate's output).
	gateFix bool
	err     error
}

// readPhase reads what decidePhase needs; false when a task of the
// project has not ended or not been collected (every phase waits for
// them: the tick then reads no more than a count).
func (c *Controller) readPhase(ctx context.Context, p domain.Project) (phaseInput, bool, error) {
	if settled, err := c.st.Settled(ctx, p.Name); err != nil || !settled {
		return phaseInput{}, false, err
	}
	tasks, err := c.st.Tasks(ctx, p.Name)
	if err != nil {
		return phaseInput{}, false, err
	}
	runs, err := c.st.Attempts(ctx, p.Name, "")
	if err != nil {
		return phaseInput{}, false, err
	}
	collected := map[string]bool{}
	for _, r := range runs {
		if !r.CollectedAt.IsZero() {
			collected[fmt.Sprintf("%s#%d", r.Task, r.Attempt)] = true
		}
	}
	in := phaseInput{phase: p.Phase, phaseTasks: map[string]domain.Task{}, allCompleted: true, runs: runs,
		runsDir: home.RunsDir(c.opts.Home, p.Name)}
	in.done = func(t domain.Task) bool {
		return domain.Terminal(t.Status) && (t.Status != domain.Completed || collected[fmt.Sprintf("%s#%d", t.ID, t.Attempt)])
	}
	for _, t := range tasks {
		if domain.IsPhaseID(t.ID) {
			in.phaseTasks[t.ID] = t
			continue
		}
		if !in.done(t) {
			return phaseInput{}, false, nil
		}
		in.author = append(in.author, t)
		in.allCompleted = in.allCompleted && t.Status == domain.Completed
	}
	if in.opts, err = p.ParseOptions(); err != nil {
		return phaseInput{}, false, err
	}
	if in.opts.GateFor(domain.IntegrationID) != "" {
		runs, err := c.st.GateRuns(ctx, p.Name, 0)
		if err != nil {
			return phaseInput{}, false, err
		}
		in.gates = map[string]*store.GateRun{}
		for i := range runs {
			g := &runs[i]
			if t, ok := in.phaseTasks[g.Task]; ok && t.Attempt == g.Attempt {
				in.gates[g.Task] = g
			}
		}
	}
	// A phase task that would start past the budget does not.
	why, stop, err := c.budgetStop(ctx, p, in.opts)
	if err != nil {
		return phaseInput{}, false, err
	}
	if stop {
		in.budget = why
	}
	round := lastRound(in.phaseTasks)
	switch {
	case p.Phase == domain.PhaseVerification && round > 0 && in.done(in.phaseTasks[domain.VerifyID(round)]):
		v := in.phaseTasks[domain.VerifyID(round)]
		verdict := readVerdict(v, c.verdictReader(ctx, in.runsDir, in.opts, v, runs))
		verdict.Round = round
		in.verdict = &verdict
	case p.Phase == domain.PhaseFix && round > 0:
		if f, ok := in.phaseTasks[domain.FixID(round)]; ok && in.done(f) && f.Status == domain.Completed {
			verdicts, err := c.st.Verdicts(ctx, p.Name)
			if err != nil {
				// A fix round with no issues would verify the same tree again.
				return phaseInput{}, false, fmt.Errorf("project %s: read the verdict of round %d: %w", p.Name, round, err)
			}
			if len(verdicts) > 0 {
				in.lastIssues = verdicts[len(verdicts)-1].Issues
			}
		}
	}
	return in, true, nil
}

// lastRound is the number of the last round: of the last verification
// or fix task (V01, F01 …; a failed project gate goes to a fix round
// without a verification), 0 for none.
func lastRound(phaseTasks map[string]domain.Task) int {
	round := 0
	for round+1 < 100 {
		_, v := phaseTasks[domain.VerifyID(round+1)]
		_, f := phaseTasks[domain.FixID(round+1)]
		if !v && !f {
			break
		}
		round++
	}
	return round
}

// decidePhase is the phase machine (SPEC §8): after the author tasks, the
// merge and S99 (integration), then verification rounds, each failed one
// followed by a fix round while max_fix_rounds allows; a phase task that
// would start past the budget does not. Pure: it reads only in.
func decidePhase(in phaseInput) phaseStep {
	result := func(ok bool) string {
		if ok && in.allCompleted {
			return domain.ResultPassed
		}
		return domain.ResultFailed
	}
	budget := phaseStep{action: phaseBudget, note: in.budget}
	switch in.phase {
	case domain.PhaseImplementation:
		switch {
		case !in.opts.Integration:
			return phaseStep{action: phaseFinish, result: result(true)}
		case !in.allCompleted && in.budget != "":
			// Tasks the budget canceled: say so rather than that the
			// integration was skipped.
			return budget
		case !in.allCompleted && !in.opts.IntegratePartial:
			return phaseStep{action: phaseFinish, result: domain.ResultFailed,
				note: "integration skipped: not every task completed (dispatch start --integrate-partial runs it anyway)"}
		case in.budget != "":
			return budget
		}
		return phaseStep{action: phaseIntegrate}

	case domain.PhaseIntegration:
		s99, ok := in.phaseTasks[domain.IntegrationID]
		switch {
		case !ok || !in.done(s99):
			return phaseStep{action: phaseWait}
		case s99.Status != domain.Completed:
			return phaseStep{action: phaseFinish, result: domain.ResultFailed, note: "integration task " + domain.IntegrationID + " " + string(s99.Status)}
		}
		return in.afterGate(s99, 1, false, budget, result)

	case domain.PhaseVerification, domain.PhaseFix:
		round := lastRound(in.phaseTasks)
		if round == 0 {
			return phaseStep{err: fmt.Errorf("in phase %s without a verification task", in.phase)}
		}
		if in.phase == domain.PhaseFix {
			f, ok := in.phaseTasks[domain.FixID(round)]
			switch {
			case !ok || !in.done(f):
				return phaseStep{action: phaseWait}
			case f.Status != domain.Completed:
				// The final tree is the last one verified, else the one
				// the fix started from.
				last := baseOf(f)
				if v, ok := in.phaseTasks[domain.VerifyID(round)]; ok {
					last = baseOf(v)
				}
				return phaseStep{action: phaseFinish, result: domain.ResultFailed, note: "fix task " + f.ID + " " + string(f.Status), final: &last}
			}
			_, verified := in.phaseTasks[domain.VerifyID(round)]
			return in.afterGate(f, round+1, verified, budget, result)
		}
		v, ok := in.phaseTasks[domain.VerifyID(round)]
		if !ok {
			return phaseStep{err: fmt.Errorf("in phase %s without verification task %s", in.phase, domain.VerifyID(round))}
		}
		verified := baseOf(v)
		if !in.done(v) || in.verdict == nil {
			return phaseStep{action: phaseWait}
		}
		step := phaseStep{verdict: in.verdict, verifier: v}
		switch {
		case in.verdict.Pass || round > in.opts.MaxFixRounds:
			// The final tree is the last one verified.
			step.action, step.result, step.final = phaseFinish, result(in.verdict.Pass), &verified
			if !in.verdict.Pass {
				step.note = fmt.Sprintf("verification failed after %d fix round(s) (max_fix_rounds)", in.opts.MaxFixRounds)
			}
		case in.budget != "":
			step.action, step.note = phaseBudget, in.budget
		default:
			step.action, step.round, step.tree, step.issues = phaseFix, round, verified, in.verdict.Issues
		}
		return step
	}
	return phaseStep{action: phaseWait}
}

// afterGate decides what follows t (S99, or a fix round), completed and
// collected, whose result begins round: the project gate's verdict on it
// first, when the project has one — a failure goes straight to the next
// fix round while max_fix_rounds allows, told the gate's output, and
// fails the project after that — then verification of round, or the end.
// A fix round that followed a verification is verified whatever the
// options say now (verified).
func (in phaseInput) afterGate(t domain.Task, round int, verified bool, budget phaseStep, result func(bool) string) phaseStep {
	tree := resultOf(in.runsDir, t, in.runs)
	if g := in.gateOf(t); g != nil && !g.Passed {
		fix := round // the fix round after S99 is F01; after F0n, F0n+1
		switch {
		case fix > in.opts.MaxFixRounds:
			return phaseStep{action: phaseFinish, result: domain.ResultFailed, final: &tree,
				note: fmt.Sprintf("the project gate failed on the result of %s after %d fix round(s) (max_fix_rounds): %s", t.ID, round-1, gateWhy(*g))}
		case in.budget != "":
			return budget
		}
		return phaseStep{action: phaseFix, round: fix, tree: tree, issues: gateIssues(g), gateFix: true}
	}
	switch {
	case !in.opts.Verification && !verified:
		return phaseStep{action: phaseFinish, result: result(true), final: &tree}
	case in.budget != "":
		return budget
	}
	return phaseStep{action: phaseVerify, round: round, tree: tree, issues: in.lastIssues}
}

// doPhase carries out the phase machine's step for p; true when the
// project finished.
func (c *Controller) doPhase(ctx context.Context, p domain.Project, in phaseInput, step phaseStep) (bool, error) {
	if step.err != nil {
		return false, fmt.Errorf("project %s is %w", p.Name, step.err)
	}
	if v := step.verdict; v != nil {
		if err := c.st.Update(ctx, func(tx *store.Tx) error {
			if err := tx.PutVerdict(ctx, p.Name, *v); err != nil {
				return err
			}
			msg := "verification passed"
			if !v.Pass {
				msg = fmt.Sprintf("verification failed: %d issue(s)", len(v.Issues))
			}
			return tx.Event(ctx, store.Event{Project: p.Name, Task: step.verifier.ID, Attempt: step.verifier.Attempt, Kind: "verdict", Message: msg})
		}); err != nil {
			return false, err
		}
	}
	switch step.action {
	case phaseFinish:
		if step.final != nil {
			if err := c.final(ctx, p, in.opts, *step.final); err != nil {
				return false, err
			}
		}
		return true, c.finish(ctx, p, step.result, step.note)
	case phaseBudget:
		c.sendNotice(ctx, p.Name, notify.BudgetStopped, "", step.note+"; no further phase task starts")
		return true, c.finish(ctx, p, domain.ResultFailed, step.note)
	case phaseIntegrate:
		return c.integrate(ctx, p, in)
	case phaseVerify:
		return false, c.startVerification(ctx, p, in.opts, in.author, step.round, step.tree, step.issues)
	case phaseFix:
		var buf bytes.Buffer
		if err := templates.ExecuteTemplate(&buf, "fix.md", map[string]any{
			"Project": p.Name, "Round": step.round, "Issues": step.issues, "Gate": step.gateFix}); err != nil {
			return false, err
		}
		title := fmt.Sprintf("Fix the issues of verification %d", step.round)
		if step.gateFix {
			title = "Make the project gate pass"
		}
		return false, c.startPhaseTask(ctx, p, in.opts, domain.FixID(step.round), "fix", title,
			buf.Bytes(), step.tree, domain.PhaseFix, fmt.Sprintf("fix round %d of %d", step.round, in.opts.MaxFixRounds), nil)
	}
	return false, nil
}

// integrate merges the author tasks' results (their branches, git-native;
// their outputs into runs/<project>/merged/ otherwise) and starts S99 on
// the merge.
func (c *Controller) integrate(ctx context.Context, p domain.Project, in phaseInput) (bool, error) {
	opts, author := in.opts, in.author
	var from taskBase
	var files []string
	var overlaps, conflicts []store.Conflict
	if opts.Repo != nil {
		m, err := c.mergeBranches(ctx, p.Name, opts.Repo, author, in.runs)
		if err != nil {
			return false, fmt.Errorf("merge the task branches of %s: %w", p.Name, err)
		}
		// The merge is checked out on the integration's node and is
		// its result's start: held to the quotas each result is.
		var over *gitrepo.Problem
		if err := gitrepo.CheckTree(ctx, opts.Repo.Dir, m.Commit, c.limits()); errors.As(err, &over) && errors.Is(err, gitrepo.ErrOverLimit) {
			return true, c.finish(ctx, p, domain.ResultFailed, fmt.Sprintf("integration not started: the merge of the task branches (%s): %s"+
				"\n  fix: raise collect_max_bytes/collect_max_files under controller: in nodes.yaml, or have the tasks commit less; then run the project again",
				strings.TrimPrefix(mergeRef(p.Name), "refs/heads/"), over.Msg))
		} else if err != nil {
			return false, fmt.Errorf("merge the task branches of %s: %w", p.Name, err)
		}
		from, files, overlaps, conflicts = taskBase{Commit: m.Commit}, m.Changed, m.Overlaps, m.Conflicts
	} else {
		merged := filepath.Join(in.runsDir, "merged")
		var err error
		files, conflicts, err = c.merge(ctx, p.Name, author, merged)
		if err != nil {
			return false, fmt.Errorf("merge outputs of %s: %w", p.Name, err)
		}
		from = taskBase{Dir: merged}
	}
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, "integration.md", map[string]any{
		"Project": p.Name, "Tasks": author, "Files": files, "Conflicts": conflicts, "Overlaps": overlaps, "Git": opts.Repo != nil}); err != nil {
		return false, err
	}
	msg := fmt.Sprintf("merged %d files from %d tasks, %d conflicts", len(files), len(author), len(conflicts))
	if opts.Repo != nil {
		msg = fmt.Sprintf("merged the branches of %d tasks (%d files changed, %d by more than one task), %d conflicts",
			len(author), len(files), len(overlaps), len(conflicts))
		for _, o := range overlaps {
			msg += fmt.Sprintf("; %s changed by %s", textfence.Path(o.Path), strings.Join(o.Tasks, ", "))
		}
	}
	return false, c.startPhaseTask(ctx, p, opts, domain.IntegrationID, "integration", "Integrate the outputs", buf.Bytes(), from, domain.PhaseIntegration,
		msg,
		func(tx *store.Tx) error { return tx.PutConflicts(ctx, p.Name, conflicts) })
}

func (c *Controller) startVerification(ctx context.Context, p domain.Project, opts domain.ProjectOptions, author []domain.Task, round int, tree taskBase, previous []string) error {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, "verification.md", map[string]any{
		"Project": p.Name, "Round": round, "Tasks": author, "PreviousIssues": previous}); err != nil {
		return err
	}
	return c.startPhaseTask(ctx, p, opts, domain.VerifyID(round), "verification", fmt.Sprintf("Verify the integrated result (round %d)", round),
		buf.Bytes(), tree, domain.PhaseVerification, fmt.Sprintf("verification round %d", round), nil)
}

// startPhaseTask adds a phase task (the author's spec for its ID when there
// is one, else the generated one) that starts from tree, and moves the
// project to phase, in one transaction.
func (c *Controller) startPhaseTask(ctx context.Context, p domain.Project, opts domain.ProjectOptions, id, typ, title string,
	generated []byte, tree taskBase, phase domain.Phase, message string, also func(*store.Tx) error) error {
	t := domain.Task{Project: p.Name, ID: id, Title: title, Type: typ, Tool: opts.PhaseTool, Priority: 1,
		DependsOn: []string{}, MaxRetries: c.config().Controller.MaxRetries, SpecFile: "(generated from controller/templates)",
		Snapshot: generated, BaseDir: tree.Dir, BaseCommit: tree.Commit, Sandbox: opts.Sandbox, Network: opts.Network, Limits: opts.Limits}
	if o, ok := opts.Overrides[id]; ok {
		t.Title, t.Tool, t.Model, t.Timeout, t.Tags, t.NodePin = o.Title, o.Tool, o.Model, o.Timeout, o.Tags, o.Node
		t.SpecFile, t.Snapshot = o.File, o.Snapshot
		t.Sandbox, t.Network, t.Limits = o.Sandbox, o.Network, o.Limits
	}
	sum := sha256.Sum256(t.Snapshot)
	t.SpecHash = hex.EncodeToString(sum[:])
	// A copy of the spec next to the outputs, for the operator to read.
	specPath := filepath.Join(home.RunsDir(c.opts.Home, p.Name), id+".md")
	if err := os.MkdirAll(filepath.Dir(specPath), 0o755); err != nil {
		return err
	}
	// Replaced whole: an ended run's archive may link the old one.
	if err := os.WriteFile(specPath+".tmp", t.Snapshot, 0o644); err != nil {
		return err
	}
	if err := os.Rename(specPath+".tmp", specPath); err != nil {
		return err
	}
	return c.st.Update(ctx, func(tx *store.Tx) error {
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		if err := tx.InsertTask(ctx, t); err != nil {
			return err
		}
		return tx.SetProject(ctx, p.Name, store.ProjectPatch{Phase: new(phase)}, "phase "+string(phase)+": "+message)
	})
}

// readVerdict reads a verifier's verdict.json with read; anything but a
// valid verdict is a failed verification naming what was wrong.
func readVerdict(v domain.Task, read func() ([]byte, error)) store.Verdict {
	out := store.Verdict{Task: v.ID}
	if v.Status != domain.Completed {
		out.Issues = []string{fmt.Sprintf("the verifier %s did not complete (%s): %s", v.ID, v.Status, readmodel.ErrorText(v.ErrorClass, v.Error))}
		return out
	}
	b, err := read()
	if errors.Is(err, errTooLarge) {
		out.Issues = []string{fmt.Sprintf("verdict.json is malformed: larger than %d KiB", maxVerdictSize>>10)}
		return out
	}
	if errors.Is(err, fs.ErrNotExist) {
		out.Issues = []string{"verdict.json is missing: the verifier wrote no verdict"}
		return out
	}
	if err != nil {
		out.Issues = []string{"verdict.json cannot be read: " + err.Error()}
		return out
	}
	var raw struct {
		Pass   *bool    `json:"pass"`
		Issues []string `json:"issues"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || raw.Pass == nil {
		why := "it has no boolean \"pass\""
		if err != nil {
			why = err.Error()
		}
		out.Issues = []string{"verdict.json is malformed: " + why}
		return out
	}
	out.Pass, out.Issues = *raw.Pass, raw.Issues
	if out.Issues == nil {
		out.Issues = []string{}
	}
	return out
}

// merge builds runs/<project>/merged/ from the collected outputs of the
// completed author tasks, in ID order. A path two tasks wrote with
// different content is a conflict: the first version stays, the other is
// stored as <path>.<ID>.conflict. Files a task left as the project's base
// gave them do not count as written.
func (c *Controller) merge(ctx context.Context, project string, author []domain.Task, merged string) ([]string, []store.Conflict, error) {
	if err := os.RemoveAll(merged); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(merged, 0o755); err != nil {
		return nil, nil, err
	}
	m := &outputMerge{dir: merged, base: map[string]string{}, owner: map[string]string{}, sumOf: map[string]string{},
		conflicts: map[string]*store.Conflict{}}
	for _, t := range author {
		if t.BaseDir == "" {
			continue
		}
		if err := copyTree(t.BaseDir, merged); err != nil {
			return nil, nil, fmt.Errorf("copy base: %w", err)
		}
		sums, err := treeSums(t.BaseDir)
		if err != nil {
			return nil, nil, err
		}
		m.base = sums
		break
	}
	for _, t := range author {
		if t.Status != domain.Completed {
			continue
		}
		if err := m.add(t.ID, filepath.Join(home.RunsDir(c.opts.Home, project), t.ID, "output")); err != nil {
			return nil, nil, err
		}
	}
	files, err := treeSums(merged)
	if err != nil {
		return nil, nil, err
	}
	var list []string
	for p := range files {
		list = append(list, p)
	}
	sort.Strings(list)
	var cs []store.Conflict
	for _, cf := range m.conflicts {
		cs = append(cs, *cf)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return list, cs, nil
}

// outputMerge is the merge of the tasks' outputs into dir over the base
// tree (base: its files' sums): which task's version each path holds
// (owner, with its sum), and the conflicts so far.
type outputMerge struct {
	dir          string
	base         map[string]string
	owner, sumOf map[string]string
	conflicts    map[string]*store.Conflict
}

// add merges task id's output/ (out) in: a file the base has as it is
// stays; a path first written takes the task's version; the same content
// again is no conflict; another content, or a file where another task has
// a directory, goes beside it as <path>.<ID>.conflict and is recorded.
func (m *outputMerge) add(id, out string) error {
	sums, err := treeSums(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, rel := range slices.Sorted(maps.Keys(sums)) {
		sum := sums[rel]
		if m.base[rel] == sum {
			continue // left as the base gave it
		}
		src := filepath.Join(out, filepath.FromSlash(rel))
		dst := filepath.Join(m.dir, filepath.FromSlash(rel))
		if at := clashAt(m.dir, rel); at != "" {
			// A file of one task where another has a directory: the
			// later one goes beside it, as for any conflict.
			other := filepath.Join(m.dir, filepath.FromSlash(at)) + "." + id + ".conflict" + strings.TrimPrefix(rel, at)
			if err := filetree.CopyFile(src, filepath.FromSlash(other)); err != nil {
				return err
			}
			cf := m.conflicts[at]
			if cf == nil {
				cf = &store.Conflict{Path: at, Tasks: []string{ownerOf(m.owner, at)}}
				m.conflicts[at] = cf
			}
			if !slices.Contains(cf.Tasks, id) {
				cf.Tasks = append(cf.Tasks, id)
			}
			continue
		}
		switch first, taken := m.owner[rel]; {
		case !taken:
			if err := filetree.CopyFile(src, dst); err != nil {
				return err
			}
			m.owner[rel], m.sumOf[rel] = id, sum
		case m.sumOf[rel] == sum:
			// Same content from two tasks: no conflict.
		default:
			if err := filetree.CopyFile(src, dst+"."+id+".conflict"); err != nil {
				return err
			}
			cf := m.conflicts[rel]
			if cf == nil {
				cf = &store.Conflict{Path: rel, Tasks: []string{first}}
				m.conflicts[rel] = cf
			}
			cf.Tasks = append(cf.Tasks, id)
		}
	}
	return nil
}

// maxVerdictSize caps the verdict.json the controller reads: it came from a
// node and may be as large as collect_max_bytes.
const maxVerdictSize = 1 << 20

var errTooLarge = gitrepo.ErrTooLarge

// readCapped reads a file of at most max bytes; a larger one is errTooLarge,
// and is not read.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// clashAt returns the path in merged that keeps the file rel from being
// placed there: an ancestor of rel that is not a directory, or rel itself
// when it is a directory. It returns "" when nothing is in the way.
func clashAt(merged, rel string) string {
	parts := strings.Split(rel, "/")
	for i := range parts {
		at := strings.Join(parts[:i+1], "/")
		fi, err := os.Lstat(filepath.Join(merged, filepath.FromSlash(at)))
		if err != nil {
			return ""
		}
		if last := i == len(parts)-1; last == fi.IsDir() {
			return at
		}
	}
	return ""
}

// ownerOf names the task whose file is at, or under the directory at, in
// the merged tree; "base" when the project's base tree put it there.
func ownerOf(owner map[string]string, at string) string {
	if id, ok := owner[at]; ok {
		return id
	}
	first := ""
	for p, id := range owner {
		if strings.HasPrefix(p, at+"/") && (first == "" || id < first) {
			first = id
		}
	}
	if first == "" {
		return "base"
	}
	return first
}

// treeSums maps every regular file under dir ('/'-separated relative path)
// to its sha256.
func treeSums(dir string) (map[string]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	out := map[string]string{}
	err := filetree.WalkSums(dir, func(rel string, _ fs.FileMode, sum string) { out[rel] = sum })
	return out, err
}

// copyTree copies the regular files and directories under src into dst,
// replacing dst.
func copyTree(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if src == "" {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return filetree.CopyFile(p, target)
		}
		return nil
	})
}
