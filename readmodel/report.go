package readmodel

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/store"
)

// Report is `dispatch report <project> --format json` (SPEC §9).
type Report struct {
	Project string `json:"project"`
	// Run is the number of the run reported (dispatch runs).
	Run          int                `json:"run"`
	Phase        domain.Phase       `json:"phase"`
	Result       string             `json:"result"`
	Totals       Totals             `json:"totals"`
	Tasks        []ReportTask       `json:"tasks"`
	Conflicts    []Conflict         `json:"conflicts"`
	Verification VerificationResult `json:"verification"`
	Nodes        []ReportNode       `json:"nodes"`
	// Dangerous lists the tasks that ran with permission-skipping flags.
	Dangerous []string `json:"dangerous"`
	// Final is the directory holding the final tree, when there is one.
	Final string `json:"final"`
	// Git is set for a git-native project (project.yaml repo:).
	Git *GitResult `json:"git,omitempty"`
	// Gate is what the project's gate found (project.yaml gate:); nil
	// when it ran none.
	Gate        *GateReport `json:"gate,omitempty"`
	GeneratedAt string      `json:"generated_at"`
	// Problem is why the controller stopped the project (an error of its
	// own, such as a result it could not export), when it did.
	Problem string `json:"problem,omitempty"`
	// Controller is whether a controller runs for the home (set by the
	// caller for the current run): a running run's report without one is
	// only what the last tick saw.
	Controller *ControllerView `json:"controller,omitempty"`
	// budget says the project's budget and whether it was reached, for
	// report.md.
	budget string
	// stop is set when the budget stopped the project: report.md says so
	// first.
	stop *BudgetStop
}

// GitResult is where a git-native project's results are in the operator's
// repository: a branch per task (dispatch/<project>/<ID>), and the result,
// once there is one, as Branch at Commit.
type GitResult struct {
	Repo string `json:"repo"`
	// Base is the commit the author tasks started from.
	Base   string `json:"base"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}

// Totals sums a project's tasks and attempts.
type Totals struct {
	Tasks       int     `json:"tasks"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	Attempts    int     `json:"attempts"`
	TokensIn    int64   `json:"tokens_in"`
	TokensOut   int64   `json:"tokens_out"`
	CostUSD     float64 `json:"cost_usd"`
	WallSeconds float64 `json:"wall_seconds"`
	// Preemptions counts the attempts a more urgent task stopped
	// (error_class preempted); in the JSON only when there were some.
	Preemptions int `json:"preemptions,omitempty"`
}

// ReportTask is a task with its attempts and collected outputs.
type ReportTask struct {
	TaskView
	// ReusedFromRun is the earlier run whose result this run reuses; 0
	// when the task ran in this run.
	ReusedFromRun int           `json:"reused_from_run"`
	Attempts      []AttemptView `json:"attempts"`
	Outputs       []OutputView  `json:"outputs"`
	LogTail       string        `json:"log_tail,omitempty"`
	// Parent is, for a task of a matrix or a broadcast, the ID of its
	// spec, which the report lists them under.
	Parent string `json:"parent,omitempty"`
}

// AttemptView is one attempt of a task.
type AttemptView struct {
	Attempt int `json:"attempt"`
	// Run is the number of the project's run the attempt belongs to (as
	// `dispatch runs` numbers them).
	Run         int           `json:"run"`
	Node        string        `json:"node"`
	Status      domain.Status `json:"status"`
	ExitCode    int           `json:"exit_code"`
	Signal      string        `json:"signal"`
	ErrorClass  string        `json:"error_class"`
	Error       string        `json:"error"`
	StartedAt   string        `json:"started_at"`
	CompletedAt string        `json:"completed_at"`
	TokensIn    int64         `json:"tokens_in"`
	TokensOut   int64         `json:"tokens_out"`
	CostUSD     float64       `json:"cost_usd"`
	Dangerous   bool          `json:"dangerous"`
	// APIMode is the api_mode the attempt ran under: its node's, or a
	// fallback while that one was paused; "" for none.
	APIMode string `json:"api_mode"`
	// Sandbox is how the attempt was confined: "bwrap", or "" for not
	// at all.
	Sandbox string `json:"sandbox"`
	// Inputs names the result of each dependency the attempt was given.
	Inputs []domain.Given `json:"inputs"`
	// FinalMessage is what its agent reported as its last word (task
	// text, at most 4 KiB).
	FinalMessage string `json:"final_message,omitempty"`
	// SlurmJob is the id of the Slurm job that ran the attempt.
	SlurmJob string `json:"slurm_job,omitempty"`
}

// OutputView is one collected output file.
type OutputView struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Conflict is two tasks writing the same path with different content.
type Conflict struct {
	Path  string   `json:"path"`
	Tasks []string `json:"tasks"`
}

// VerificationResult summarises the verification rounds; Pass is null when
// verification did not run.
type VerificationResult struct {
	Rounds int      `json:"rounds"`
	Pass   *bool    `json:"pass"`
	Issues []string `json:"issues"`
}

// ReportNode is one node's use in the project.
type ReportNode struct {
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Attempts int     `json:"attempts"`
	Busy     float64 `json:"busy_seconds"`
}

// BuildReport assembles a project's report from the database and the
// collected logs under home.
func BuildReport(ctx context.Context, st *store.Store, cfg Nodes, home, project string, now time.Time) (rep *Report, err error) {
	sv, err := Status(ctx, st, cfg, project, now)
	if err != nil {
		return nil, err
	}
	p, err := st.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	runs, err := st.Attempts(ctx, project, "")
	if err != nil {
		return nil, err
	}
	defer func(r **Report) {
		if *r != nil {
			(*r).budget = budgetLine(p, (*r).Totals)
			(*r).stop = sv.Budget
		}
	}(&rep)
	files, err := st.Files(ctx, project, "")
	if err != nil {
		return nil, err
	}
	// An archived run's files are in runs/<project>/run-<N>/.
	dir := RunDir(home, project, st.Archived())
	r := &Report{Project: project, Run: p.Run, Phase: sv.Phase, Result: p.Result, Tasks: []ReportTask{}, Conflicts: []Conflict{},
		Verification: VerificationResult{Issues: []string{}}, Nodes: []ReportNode{}, Dangerous: []string{}, GeneratedAt: jsonTime(now),
		Problem: p.Problem}
	if r.Result == "" {
		r.Result = domain.ResultRunning
		if p.State == domain.ProjectStopped {
			r.Result = domain.ResultStopped
		}
	}
	attempts, use, dangerous := r.addAttempts(runs, p.Run)
	if err := r.addIntegration(ctx, st, project); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "final")); err == nil {
		r.Final = filepath.Join(dir, "final")
	}
	if opts, err := p.ParseOptions(); err == nil && opts.Repo != nil {
		r.Git = &GitResult{Repo: opts.Repo.Dir, Base: opts.Repo.Commit, Commit: p.FinalCommit}
		if p.FinalCommit != "" {
			r.Git.Branch = "dispatch/" + project + "/final"
		}
	}
	r.addTasks(sv, files, attempts, dangerous, dir)
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		return nil, err
	}
	if err := r.addGate(ctx, st, project, p.Run, tasks); err != nil {
		return nil, err
	}
	end := p.FinishedAt
	if end.IsZero() {
		end = now
	}
	if !p.StartedAt.IsZero() {
		r.Totals.WallSeconds = end.Sub(p.StartedAt).Seconds()
	}
	r.addNodes(sv.Nodes, use)
	return r, nil
}

// preemptedClass is the error class of an attempt a more urgent task
// stopped (the controller's word).
const preemptedClass = "preempted"

// addAttempts counts the attempts of run number run in the totals and
// returns them by task, the use of each node and the tasks that ran with
// permission checks off.
func (r *Report) addAttempts(runs []domain.Attempt, number int) (attempts map[string][]AttemptView, use map[string]*ReportNode, dangerous map[string]bool) {
	attempts, use, dangerous = map[string][]AttemptView{}, map[string]*ReportNode{}, map[string]bool{}
	for _, run := range runs {
		if run.Run != number {
			continue // an attempt of another run
		}
		dangerous[run.Task] = dangerous[run.Task] || run.Dangerous
		attempts[run.Task] = append(attempts[run.Task], attemptView(run))
		r.Totals.Attempts++
		if run.ErrorClass == preemptedClass {
			r.Totals.Preemptions++
		}
		// Stored figures were clamped when they arrived; the sums still
		// saturate rather than wrap or overflow to infinity.
		r.Totals.TokensIn = addSat(r.Totals.TokensIn, max(run.TokensIn, 0))
		r.Totals.TokensOut = addSat(r.Totals.TokensOut, max(run.TokensOut, 0))
		r.Totals.CostUSD = min(r.Totals.CostUSD+clampCost(run.CostUSD), math.MaxFloat64)
		u := use[run.Node]
		if u == nil {
			u = &ReportNode{Name: run.Node}
			use[run.Node] = u
		}
		u.Attempts++
		if !run.StartedAt.IsZero() && run.CompletedAt.After(run.StartedAt) {
			u.Busy += run.CompletedAt.Sub(run.StartedAt).Seconds()
		}
	}
	return attempts, use, dangerous
}

// attemptView is a as the report shows it.
func attemptView(a domain.Attempt) AttemptView {
	v := AttemptView{Dangerous: a.Dangerous, Sandbox: a.Sandbox, SlurmJob: a.SlurmJob, Attempt: a.Attempt, Run: a.Run, Node: a.Node, Status: a.Status,
		ExitCode: a.ExitCode, Signal: a.Signal, ErrorClass: a.ErrorClass, Error: a.Error,
		StartedAt: jsonTime(a.StartedAt), CompletedAt: jsonTime(a.CompletedAt),
		TokensIn: a.TokensIn, TokensOut: a.TokensOut, CostUSD: a.CostUSD, APIMode: a.APIMode,
		Inputs: a.Given, FinalMessage: a.FinalMessage}
	if v.Inputs == nil {
		v.Inputs = []domain.Given{}
	}
	return v
}

// addIntegration adds the merge's conflicts and the last verdict.
func (r *Report) addIntegration(ctx context.Context, st *store.Store, project string) error {
	conflicts, err := st.Conflicts(ctx, project)
	if err != nil {
		return err
	}
	for _, c := range conflicts {
		r.Conflicts = append(r.Conflicts, Conflict{Path: c.Path, Tasks: c.Tasks})
	}
	verdicts, err := st.Verdicts(ctx, project)
	if err != nil {
		return err
	}
	if len(verdicts) > 0 {
		last := verdicts[len(verdicts)-1]
		pass := last.Pass
		r.Verification = VerificationResult{Rounds: len(verdicts), Pass: &pass, Issues: last.Issues}
		if r.Verification.Issues == nil {
			r.Verification.Issues = []string{}
		}
	}
	return nil
}

// addTasks adds the tasks of sv with their attempts, outputs (files) and,
// for a failed one, its log's tail from the run's directory dir.
func (r *Report) addTasks(sv *StatusView, files []store.File, attempts map[string][]AttemptView, dangerous map[string]bool, dir string) {
	outputs := map[string][]OutputView{}
	for _, f := range files {
		outputs[f.Task] = append(outputs[f.Task], OutputView{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	for _, t := range sv.Tasks {
		if dangerous[t.ID] {
			r.Dangerous = append(r.Dangerous, t.ID)
		}
		rt := ReportTask{TaskView: t, ReusedFromRun: t.ReusedFrom, Attempts: attempts[t.ID], Outputs: outputs[t.ID]}
		if spec := domain.SpecID(t.ID); spec != t.ID {
			rt.Parent = spec
		}
		if rt.Attempts == nil {
			rt.Attempts = []AttemptView{}
		}
		if rt.Outputs == nil {
			rt.Outputs = []OutputView{}
		}
		if t.Status == domain.Failed {
			rt.LogTail = LogTail(filepath.Join(dir, t.ID, "task.log"), 20)
		}
		r.Tasks = append(r.Tasks, rt)
	}
	r.Totals.Tasks = len(sv.Tasks)
	r.Totals.Completed = sv.Counts.Completed
	r.Totals.Failed = sv.Counts.Failed
}

// addNodes adds each node's state and use: those of nodes.yaml, then those
// no longer in it, by name.
func (r *Report) addNodes(nodes []NodeView, use map[string]*ReportNode) {
	for _, n := range nodes {
		u := use[n.Name]
		if u == nil {
			u = &ReportNode{Name: n.Name}
		}
		u.State = n.State
		r.Nodes = append(r.Nodes, *u)
		delete(use, n.Name)
	}
	for _, u := range use { // nodes no longer in nodes.yaml
		r.Nodes = append(r.Nodes, *u)
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })
}

// logTailBytes is how much of the end of a collected log logTail reads:
// the log came from a node and may be as large as collect_max_bytes.
const logTailBytes = 64 << 10

// LogTail returns the last n lines of a collected log, from its last
// logTailBytes.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var skip int64
	if fi, err := f.Stat(); err == nil && fi.Size() > logTailBytes {
		skip = fi.Size() - logTailBytes
	}
	b, err := io.ReadAll(io.NewSectionReader(f, skip, logTailBytes))
	if err != nil {
		return ""
	}
	if skip > 0 {
		// The first line read is cut: start after it.
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = shortenLine(l)
	}
	return strings.Join(lines, "\n")
}

// maxTailLine bounds a line of a log excerpt: one stream-json event of an
// agent CLI (its init event lists every tool and skill) is kilobytes long.
const maxTailLine = 400

// shortenLine cuts a line over maxTailLine at a character boundary and
// says how long it was.
func shortenLine(l string) string {
	if len(l) <= maxTailLine {
		return l
	}
	cut := maxTailLine
	for cut > 0 && !utf8.RuneStart(l[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", l[:cut], len(l))
}

// Markdown renders the report for people: the outcome and what to do next
// first, then the details.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# dispatch report: %s\n\n", r.Project)
	if r.Result == domain.ResultRunning {
		if line := r.Controller.Line(r.Project, time.Now()); line != "" {
			fmt.Fprintf(&b, "> **%s**\n\n", line)
		}
	}
	// A budget that stopped the project is the first thing to know.
	stop := r.stop
	if r.Result != domain.ResultFailed && r.Result != domain.ResultRunning {
		stop = nil // passed, or stopped by the operator
	}
	failed, blocked := r.idsWith(domain.Failed), r.idsWith(domain.Blocked)
	r.mdOutcome(&b, stop)
	r.mdNext(&b, stop, failed, blocked)
	r.mdFirstScreen(&b, failed)
	for _, section := range []func(*strings.Builder){r.mdTasks, r.mdFailures, r.mdRetries, r.mdModes,
		r.mdConflicts, r.mdGate, r.mdVerification, r.mdNodes, r.mdCost, r.mdSandbox} {
		section(&b)
	}
	// Errors, log tails and titles came from nodes and tasks: report.md
	// is printed on terminals.
	return termtext.Clean(b.String())
}

// idsWith are the IDs of the tasks in status, in the report's order.
func (r *Report) idsWith(status domain.Status) []string {
	var out []string
	for _, t := range r.Tasks {
		if t.Status == status {
			out = append(out, t.ID)
		}
	}
	return out
}

// mdOutcome is the report's first line (the budget's stop first, when it
// stopped the project), and the run it was, when there were several.
func (r *Report) mdOutcome(b *strings.Builder, stop *BudgetStop) {
	outcome := map[string]string{domain.ResultPassed: "PASSED", domain.ResultFailed: "FAILED", domain.ResultRunning: "RUNNING", domain.ResultStopped: "STOPPED"}[r.Result]
	head := fmt.Sprintf("**%s** — ", outcome)
	if stop != nil {
		stop.Ended = r.Result == domain.ResultFailed
		fmt.Fprintf(b, "%s%s.\n\n", head, stop.Summary())
		head = ""
	}
	preempted := ""
	if n := r.Totals.Preemptions; n > 0 {
		preempted = fmt.Sprintf(" (%d preempted by more urgent tasks)", n)
	}
	fmt.Fprintf(b, "%s%d of %d tasks completed, %d failed, %d attempts%s, %s wall time.\n\n",
		head, r.Totals.Completed, r.Totals.Tasks, r.Totals.Failed, r.Totals.Attempts, preempted, FormatSeconds(r.Totals.WallSeconds))
	var reused []string
	for _, t := range r.Tasks {
		if t.ReusedFromRun > 0 {
			reused = append(reused, fmt.Sprintf("%s (run %d)", t.ID, t.ReusedFromRun))
		}
	}
	if r.Run > 1 || len(reused) > 0 {
		fmt.Fprintf(b, "Run %d of %s (`dispatch runs %s` lists them).", r.Run, r.Project, r.Project)
		if len(reused) > 0 {
			fmt.Fprintf(b, " Reused from earlier runs, their inputs unchanged: %s.", strings.Join(reused, ", "))
		}
		b.WriteString("\n\n")
	}
}

// mdNext says what to do next.
func (r *Report) mdNext(b *strings.Builder, stop *BudgetStop, failed, blocked []string) {
	switch {
	case stop != nil:
		fmt.Fprintf(b, "Next: %s\n\n", stop.Next(r.Project))
	case r.Result == domain.ResultRunning:
		fmt.Fprintf(b, "Next: the batch is still running; follow it with `dispatch status %s`.\n\n", r.Project)
	case r.Result == domain.ResultStopped && r.Problem != "":
		fmt.Fprintf(b, "Stopped by dispatch: %s.\n\nNext: fix that, then `dispatch start %s` resumes; tasks that were running go on and are collected, nothing new starts.\n\n",
			mdCode(r.Problem), r.Project)
	case r.Result == domain.ResultStopped:
		states := map[string]domain.Status{}
		for _, t := range r.Tasks {
			states[t.ID] = t.Status
		}
		fmt.Fprintf(b, "Next: stopped by the operator; tasks that were running go on (unless killed) and are collected, nothing new starts. `%s`.\n\n",
			StoppedNext(r.Project, states))
	case len(failed) > 0 && r.Problem != "":
		// What stopped the project is what failed its tasks (a gate
		// command missing on a node): the stop's advice, which takes
		// project.yaml anew, where a retry would keep the run's.
		fmt.Fprintf(b, "Stopped by dispatch: %s.\n\nNext: fix that, then `dispatch start %s`: a new run reruns the failed tasks (%s) and reuses what completed.\n\n",
			mdCode(r.Problem), r.Project, strings.Join(failed, ", "))
	case len(failed) > 0:
		fmt.Fprintf(b, "Next: read the failures below, fix the specs or the cause, then `dispatch retry %s %s`.\n", r.Project, strings.Join(failed, " "))
		if len(blocked) > 0 {
			fmt.Fprintf(b, "Blocked by them: %s (they run once their dependencies complete).\n", strings.Join(blocked, ", "))
		}
		b.WriteString("\n")
	case r.Git != nil && r.Git.Commit != "":
		fmt.Fprintf(b, "Next: the result is the branch `%s` (commit %s) of %s, also checked out in `runs/%s/final/`; "+
			"each task's work is on its branch `dispatch/%s/<ID>`, with its diffstat in `runs/%s/<ID>/diffstat.txt`.\n\n",
			r.Git.Branch, r.Git.Commit, r.Git.Repo, r.Project, r.Project, r.Project)
	case r.Git != nil:
		fmt.Fprintf(b, "Next: each task's work is on its branch `dispatch/%s/<ID>` of %s, with its diffstat in `runs/%s/<ID>/diffstat.txt`.\n\n",
			r.Project, r.Git.Repo, r.Project)
	case r.Final != "":
		fmt.Fprintf(b, "Next: the result is in `runs/%s/final/`; each task's own output is in `runs/%s/<ID>/output/`.\n\n", r.Project, r.Project)
	default:
		fmt.Fprintf(b, "Next: the outputs are in `runs/%s/<ID>/output/`.\n\n", r.Project)
	}
}

// mdFirstScreen is the rest of the first screen: what failed, in a line
// each, capped so that a large batch still fits (the details follow).
func (r *Report) mdFirstScreen(b *strings.Builder, failed []string) {
	if len(failed) > 0 {
		b.WriteString("Failed:\n")
		shown := 0
		for _, t := range r.Tasks {
			if t.Status != domain.Failed {
				continue
			}
			if shown == firstScreenItems {
				fmt.Fprintf(b, "- … and %d more (see Failures below)\n", len(failed)-shown)
				break
			}
			fmt.Fprintf(b, "- %s %s: %s\n", t.ID, clip(t.Title, 40), clip(errText(t.TaskView), 70))
			shown++
		}
		b.WriteString("\n")
	}
	if r.Verification.Pass != nil && !*r.Verification.Pass {
		fmt.Fprintf(b, "Verification failed after %d round(s):\n", r.Verification.Rounds)
		for i, is := range r.Verification.Issues {
			if i == firstScreenItems {
				fmt.Fprintf(b, "- … and %d more (see Verification below)\n", len(r.Verification.Issues)-i)
				break
			}
			fmt.Fprintf(b, "- %s\n", mdLine(clip(is, 100)))
		}
		b.WriteString("\n")
	}
	if len(r.Conflicts) > 0 {
		fmt.Fprintf(b, "%d merge conflict(s): see Conflicts below.\n\n", len(r.Conflicts))
	}
	r.mdStale(b)
}

// mdStale lists the tasks whose result was made from a dependency's
// result since replaced, with the command that makes them again.
func (r *Report) mdStale(b *strings.Builder) {
	header := false
	for _, t := range r.Tasks {
		if !t.Stale {
			continue
		}
		if !header {
			b.WriteString("Stale (made from a dependency's result that has changed since):\n")
			header = true
		}
		fmt.Fprintf(b, "- %s %s: %s; `dispatch retry %s %s --downstream` makes it again\n", t.ID, clip(t.Title, 40), mdLine(t.StaleWhy), r.Project, t.ID)
	}
	if header {
		b.WriteString("\n")
	}
}

func (r *Report) mdTasks(b *strings.Builder) {
	b.WriteString("## Tasks\n\n| ID | Title | Status | Node | Attempts | Duration | Error |\n|---|---|---|---|---|---|---|\n")
	for i, t := range r.Tasks {
		id := t.ID
		if t.Parent != "" {
			if i == 0 || r.Tasks[i-1].Parent != t.Parent {
				fmt.Fprintf(b, "| %s | %s | | | | | |\n", t.Parent, r.groupSummary(t.Parent))
			}
			id = "↳ " + id
		}
		status := string(t.Status)
		if t.Stale {
			status += " (stale)"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %s | %s |\n", id, mdCell(t.Title), status, t.Node,
			len(t.Attempts), FormatSeconds(t.DurationSeconds), mdCell(errText(t.TaskView)))
	}
	b.WriteString("\n")
}

// groupSummary counts the tasks a matrix or broadcast spec made, by
// status: "3 tasks: 2 completed, 1 failed".
func (r *Report) groupSummary(parent string) string {
	n := 0
	var order []domain.Status
	count := map[domain.Status]int{}
	for _, t := range r.Tasks {
		if t.Parent != parent {
			continue
		}
		n++
		if count[t.Status]++; count[t.Status] == 1 {
			order = append(order, t.Status)
		}
	}
	var parts []string
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d %s", count[s], s))
	}
	return fmt.Sprintf("%d tasks: %s", n, strings.Join(parts, ", "))
}

func (r *Report) mdFailures(b *strings.Builder) {
	header := false
	for _, t := range r.Tasks {
		if t.Status != domain.Failed {
			continue
		}
		if !header {
			b.WriteString("## Failures\n\n")
			header = true
		}
		fmt.Fprintf(b, "### %s — %s\n\n%s after %d attempt(s). Log: `runs/%s/%s/task.log`\n\n", t.ID, mdCell(t.Title),
			mdLine(errText(t.TaskView)), len(t.Attempts), r.Project, t.ID)
		if t.LogTail != "" {
			fmt.Fprintf(b, "%s\n", mdFence(t.LogTail))
		}
	}
}

func (r *Report) mdRetries(b *strings.Builder) {
	retried := false
	for _, t := range r.Tasks {
		if len(t.Attempts) <= 1 {
			continue
		}
		if !retried {
			b.WriteString("## Retries\n\n")
			retried = true
		}
		var parts []string
		for _, a := range t.Attempts {
			s := fmt.Sprintf("#%d %s on %s", a.Attempt, a.Status, a.Node)
			if a.APIMode != "" {
				s += " under " + a.APIMode
			}
			if a.ErrorClass != "" {
				s += " (" + a.ErrorClass + ")"
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(b, "- %s: %s\n", t.ID, oneLine(strings.Join(parts, ", ")))
	}
	if retried {
		b.WriteString("\n")
	}
}

// mdModes says which account each attempt used, once more than one took
// part.
func (r *Report) mdModes(b *strings.Builder) {
	modes := map[string]bool{}
	for _, t := range r.Tasks {
		for _, a := range t.Attempts {
			if a.APIMode != "" {
				modes[a.APIMode] = true
			}
		}
	}
	if len(modes) <= 1 {
		return
	}
	b.WriteString("## API modes\n\n")
	for _, t := range r.Tasks {
		var parts []string
		for _, a := range t.Attempts {
			if a.APIMode != "" {
				parts = append(parts, fmt.Sprintf("#%d %s", a.Attempt, a.APIMode))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(b, "- %s: %s\n", t.ID, strings.Join(parts, ", "))
		}
	}
	b.WriteString("\n")
}

func (r *Report) mdConflicts(b *strings.Builder) {
	b.WriteString("## Conflicts\n\n")
	if len(r.Conflicts) == 0 {
		b.WriteString("None.\n\n")
		return
	}
	for _, c := range r.Conflicts {
		if r.Git != nil {
			fmt.Fprintf(b, "- %s: %s; git could not merge it: committed with conflict markers for %s to resolve\n",
				mdCode(c.Path), strings.Join(c.Tasks, ", "), domain.IntegrationID)
			continue
		}
		fmt.Fprintf(b, "- %s: kept %s; other version(s) from %s saved as %s in merged/\n",
			mdCode(c.Path), c.Tasks[0], strings.Join(c.Tasks[1:], ", "), mdCode(c.Path+".<ID>.conflict"))
	}
	b.WriteString("\n")
}

func (r *Report) mdVerification(b *strings.Builder) {
	b.WriteString("## Verification\n\n")
	if r.Verification.Pass == nil {
		b.WriteString("Not run.\n\n")
		return
	}
	fmt.Fprintf(b, "%d round(s); the last one %s.\n\n", r.Verification.Rounds, map[bool]string{true: "passed", false: "failed"}[*r.Verification.Pass])
	for _, is := range r.Verification.Issues {
		fmt.Fprintf(b, "- %s\n", mdLine(is))
	}
	if len(r.Verification.Issues) > 0 {
		b.WriteString("\n")
	}
}

func (r *Report) mdNodes(b *strings.Builder) {
	b.WriteString("## Nodes\n\n| Node | State | Attempts | Busy |\n|---|---|---|---|\n")
	for _, n := range r.Nodes {
		fmt.Fprintf(b, "| %s | %s | %d | %s |\n", n.Name, n.State, n.Attempts, FormatSeconds(n.Busy))
	}
}

func (r *Report) mdCost(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Tokens and cost\n\n%d tokens in, %d tokens out, $%.4f.\n", r.Totals.TokensIn, r.Totals.TokensOut, r.Totals.CostUSD)
	if r.budget != "" {
		fmt.Fprintf(b, "\n%s\n", r.budget)
	}
}

// mdSandbox lists the attempts confined to their task, and those that ran
// with the tool's permission checks off.
func (r *Report) mdSandbox(b *strings.Builder) {
	var confined, open []string
	for _, t := range r.Tasks {
		for _, a := range t.Attempts {
			name := fmt.Sprintf("%s#%d", t.ID, a.Attempt)
			if a.Sandbox != "" {
				confined = append(confined, name+" ("+a.Sandbox+")")
			} else {
				open = append(open, name)
			}
		}
	}
	if len(confined) > 0 {
		fmt.Fprintf(b, "\n## Sandbox\n\nConfined to their task (sandbox): %s.\n", strings.Join(confined, ", "))
		if len(open) > 0 {
			fmt.Fprintf(b, "Not confined (ran as the node user): %s.\n", strings.Join(open, ", "))
		}
	}
	if len(r.Dangerous) > 0 {
		fmt.Fprintf(b, "\n## Ran with permission checks off\n\nThese tasks ran with the tool's dangerous flags (dangerous: true on their node or api_mode): %s.\n",
			strings.Join(r.Dangerous, ", "))
	}
}

// firstScreenItems caps each list on the report's first screen.
const firstScreenItems = 5

// clip shortens s to n runes for a one-line summary.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func errText(t TaskView) string { return ErrorText(t.ErrorClass, t.Error) }

// ErrorText is an error class and its message as one line: "class: msg".
func ErrorText(class, msg string) string {
	switch {
	case class == "":
		return msg // a canceled task has a reason and no class
	case msg == "":
		return class
	}
	return class + ": " + msg
}

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

// FormatSeconds renders a duration for people: "-" for none, "<0.1s" for
// the instant, else rounded to a tenth of a second.
func FormatSeconds(s float64) string {
	switch {
	case s <= 0:
		return "-"
	case s < 0.1:
		return "<0.1s"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// WriteReport writes runs/<project>/report.md.
func WriteReport(r *Report, homeDir string) (string, error) {
	dir := home.RunsDir(homeDir, r.Project)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "report.md")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(r.Markdown()), 0o644); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}

// clampCost is a stored cost fit to sum: finite, not negative, at most
// domain.MaxCostUSD (figures from an older database were not clamped).
func clampCost(v float64) float64 {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return min(v, domain.MaxCostUSD)
}

// addSat returns a+b for counts that are never negative, saturating at
// the largest int64 instead of wrapping to a negative total.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// budgetLine describes a project's budget and its state for report.md; ""
// when it has none.
func budgetLine(p domain.Project, t Totals) string {
	opts, err := p.ParseOptions()
	if err != nil || !opts.HasBudget() {
		return ""
	}
	var parts []string
	if opts.BudgetUSD > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", opts.BudgetUSD))
	}
	if opts.BudgetTokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", opts.BudgetTokens))
	}
	line := "Budget: " + strings.Join(parts, " or ")
	if why, reached := opts.BudgetReached(t.CostUSD, t.TokensIn+t.TokensOut); reached {
		line += " — " + why + "; nothing new started after that."
	} else {
		line += " — not reached."
	}
	return line
}
