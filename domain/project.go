package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/notify"
)

// Project states.
const (
	ProjectActive  = "active"
	ProjectStopped = "stopped"
	ProjectDone    = "done"
)

// Project is one started project.
type Project struct {
	Name       string
	State      string
	Phase      Phase
	Result     string
	Options    string
	StartedAt  time.Time
	FinishedAt time.Time
	// FinalCommit is, in a git-native project, the commit of the result
	// (refs/heads/dispatch/<project>/final).
	FinalCommit string
	// Run is the number of the project's current run (1 for the first),
	// or of the archived run read through store.Store.AtRun.
	Run int
	// Problem is why the controller stopped the project, when an error of
	// its own kept it from going on (empty otherwise); resuming clears it.
	Problem string
}

// MaxCostUSD bounds one attempt's recorded cost, as the wrapper bounds what
// it reports (wire.MaxCostUSD): sums over many attempts stay finite.
const MaxCostUSD = 1e9

// ProjectOptions are the per-project settings kept in the database with the
// project (projects.options, JSON), so that a restarted controller
// schedules it the same way.
type ProjectOptions struct {
	HaltFail int    `json:"halt_fail,omitempty"`
	Setup    string `json:"setup,omitempty"`
	// Integration and Verification say whether the phase runs (project.yaml,
	// --no-integrate); IntegratePartial runs it even when some author task
	// did not complete.
	Integration      bool `json:"integration"`
	Verification     bool `json:"verification"`
	IntegratePartial bool `json:"integrate_partial,omitempty"`
	MaxFixRounds     int  `json:"max_fix_rounds"`
	// PhaseTool is the tool of generated phase tasks; "" means each node's
	// own tool (the usual: routes send phase types to nodes set up for
	// them). project.yaml's tool is for the author's tasks only: a generated
	// prompt would not even run under the shell tool.
	PhaseTool string `json:"phase_tool,omitempty"`
	// Overrides are author-supplied phase specs (S99, V01, F01, ...), by ID.
	Overrides map[string]PhaseSpec `json:"overrides,omitempty"`
	// Sandbox, Network and Limits are project.yaml's, for the generated
	// phase tasks (an author task carries its own): a project that must
	// run sandboxed runs its S99, V and F sandboxed too.
	Sandbox string         `json:"sandbox,omitempty"`
	Network string         `json:"network,omitempty"`
	Limits  yamlval.Limits `json:"limits,omitempty"`
	// Stall is project.yaml's stall_timeout, for the generated phase tasks
	// (an author task carries its own).
	Stall time.Duration `json:"stall,omitempty"`
	// BudgetUSD and BudgetTokens stop launching once the project's
	// recorded cost or tokens reach them (project.yaml budget:, start
	// --budget-usd); 0 is no limit.
	BudgetUSD    float64 `json:"budget_usd,omitempty"`
	BudgetTokens int64   `json:"budget_tokens,omitempty"`
	// MaxAttemptUSD is project.yaml's budget.max_attempt_usd: the most one
	// attempt is counted as costing (see AttemptCeiling); 0 is the default.
	MaxAttemptUSD float64 `json:"max_attempt_usd,omitempty"`
	// Repo is set for a git-native project (project.yaml repo:).
	Repo *RepoOptions `json:"repo,omitempty"`
	// Notify is project.yaml's notify block; nil leaves it to nodes.yaml's.
	// Its secret is a ${VAR} reference, never the secret.
	Notify *notify.Config `json:"notify,omitempty"`
	// BaseTree is the sha256 of project.yaml's base: tree (paths, modes
	// and contents) when the run began: a task's result is reused only
	// from the same base.
	BaseTree string `json:"base_tree,omitempty"`
	// Trigger says what began the run: "start" (by hand), "schedule", or
	// "catch-up" (one run for the occurrences missed while no daemon ran).
	Trigger string `json:"trigger,omitempty"`
	// Gate is project.yaml's gate: the checks dispatch runs on the
	// results itself; nil for none.
	Gate *GateOptions `json:"gate,omitempty"`
}

// GateOptions are project.yaml's gate: commands run by /bin/sh -c on
// results, exit 0 passing.
type GateOptions struct {
	// Task is run on each author task's result: a failure fails the
	// attempt (error_class gate), whose retry is told why.
	Task string `json:"task,omitempty"`
	// Project is run on the integrated result after S99 and each fix
	// round: the project passes only when its last run passed.
	Project string `json:"project,omitempty"`
	// Timeout bounds each gate run.
	Timeout time.Duration `json:"timeout"`
	// Baseline runs the project gate on the base before any task (the
	// task BaselineID).
	Baseline bool `json:"baseline,omitempty"`
}

// GateDecides reports whether a failed gate of task id fails its attempt:
// the task gate of an author task does; the project gate (the phase
// decides on it) and the baseline (it only tells) do not.
func (o ProjectOptions) GateDecides(id string) bool {
	return !IsPhaseID(id) && !(id == BaselineID && o.Gate != nil && o.Gate.Baseline)
}

// BaselineID is the task project.yaml's gate.baseline adds: a shell task
// that changes nothing, so that the project gate checks the base itself
// before the tasks' work is gated — a broken base told apart from broken
// work.
const BaselineID = "G00"

// GateFor is the gate command of a task: the task gate for an author
// task, the project gate for S99, the fix rounds and the baseline, ""
// for none.
func (o ProjectOptions) GateFor(id string) string {
	switch {
	case o.Gate == nil:
		return ""
	case id == BaselineID && o.Gate.Baseline:
		return o.Gate.Project
	case !IsPhaseID(id):
		return o.Gate.Task
	case id == IntegrationID || PhaseOf(id) == PhaseFix:
		return o.Gate.Project
	}
	return ""
}

// RepoOptions are a git-native project's repository on the operator's
// machine and the commit its author tasks start from.
type RepoOptions struct {
	Dir    string `json:"dir"` // the repository's git directory, absolute
	Ref    string `json:"ref"`
	Commit string `json:"commit"`
}

// PhaseSpec is an author-supplied spec for a phase task.
type PhaseSpec struct {
	Title    string        `json:"title"`
	File     string        `json:"file"`
	Tool     string        `json:"tool,omitempty"`
	Model    string        `json:"model,omitempty"`
	Timeout  time.Duration `json:"timeout,omitempty"`
	Tags     []string      `json:"tags,omitempty"`
	Node     string        `json:"node,omitempty"`
	Snapshot []byte        `json:"snapshot"`
	Hash     string        `json:"hash"`
	// Sandbox, Network and Limits: its front matter's, else project.yaml's.
	Sandbox string         `json:"sandbox,omitempty"`
	Network string         `json:"network,omitempty"`
	Limits  yamlval.Limits `json:"limits,omitempty"`
}

// ParseOptions reads the options stored with p.
func (p Project) ParseOptions() (ProjectOptions, error) {
	var o ProjectOptions
	if err := json.Unmarshal([]byte(p.Options), &o); err != nil {
		// Guessing would run the project without its setup, halt rule or
		// integration phase: nothing goes on for it until this is fixed.
		return o, fmt.Errorf("project %s: read its stored options: %w (fix: run `dispatch start %s` again to store them afresh)", p.Name, err, p.Name)
	}
	return o, nil
}

// DefaultMaxAttemptUSD is the ceiling of one attempt's recorded cost when
// project.yaml's budget names none.
const DefaultMaxAttemptUSD = 50

// AttemptCeiling is the most one attempt of the project is counted as
// costing: a cost reported above it is a forgery or a runaway, and counts
// as the ceiling.
func (o ProjectOptions) AttemptCeiling() float64 {
	if o.MaxAttemptUSD > 0 {
		return min(o.MaxAttemptUSD, MaxCostUSD)
	}
	return DefaultMaxAttemptUSD
}

// HasBudget reports whether the project has a spending limit.
func (o ProjectOptions) HasBudget() bool { return o.BudgetUSD > 0 || o.BudgetTokens > 0 }

// BudgetReached says whether spending has reached the project's budget
// (project.yaml budget:, start --budget-usd), and how, for status and the
// report. A zero limit is no limit.
func (o ProjectOptions) BudgetReached(usd float64, tokens int64) (string, bool) {
	switch {
	case o.BudgetUSD > 0 && usd >= o.BudgetUSD:
		return fmt.Sprintf("budget reached: $%.2f spent of $%.2f", usd, o.BudgetUSD), true
	case o.BudgetTokens > 0 && tokens >= o.BudgetTokens:
		return fmt.Sprintf("budget reached: %d tokens used of %d", tokens, o.BudgetTokens), true
	}
	return "", false
}
