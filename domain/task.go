package domain

import (
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// StartFrom values (start_from:): what a task with depends_on in a plain
// project starts from. "" is StartInputs. In a git project "" and
// StartDependencies stack the task on its dependencies' results (their
// commits merged onto the base), StartBase starts it on the base, and
// StartInputs is refused (spec).
const (
	StartInputs       = "inputs"       // its dependencies' outputs, read-only, in inputs/<ID>/
	StartDependencies = "dependencies" // its dependencies' outputs copied into output/
	StartBase         = "base"         // the base alone, as a task without dependencies
)

// OnConflict values (on_conflict:): what a conflict between the results a
// git project's task is stacked on does. "" is ConflictMarkers.
const (
	ConflictMarkers = "markers" // the task starts on the merge, git's markers committed, the conflicts in its prompt
	ConflictFail    = "fail"    // the task fails, not retried
)

// Task is one task of a project with its current state.
type Task struct {
	Project   string
	ID        string
	Title     string
	Type      string
	Tool      string
	Model     string
	Priority  int
	DependsOn []string
	Tags      []string
	NodePin   string
	Timeout   time.Duration
	// Stall is the task's own stall_timeout (front matter); 0 means the
	// project's, the node's or the default.
	Stall       time.Duration
	MaxRetries  int
	SpecFile    string
	SpecHash    string
	Snapshot    []byte
	Status      Status
	Attempt     int
	RetriesUsed int
	// RateLimitRetries counts retries after rate limits, which do not use
	// up RetriesUsed.
	RateLimitRetries int
	// LostRetries counts requeues after attempts lost with their node,
	// which do not use up RetriesUsed either.
	LostRetries int
	Node        string
	NotBefore   time.Time
	ExitCode    int
	ErrorClass  string
	Error       string
	StartedAt   time.Time
	CompletedAt time.Time
	// Heartbeat is the last heartbeat content seen and HeartbeatAt the
	// controller's time when it last changed: remote clocks are never compared.
	Heartbeat   string
	HeartbeatAt time.Time
	// Warning is a problem of the running attempt that is not a failure.
	Warning string
	// BaseDir is a directory on the controller copied into the task's
	// output/ before it starts (project.yaml base, or the tree an
	// integration-phase task works on).
	BaseDir string
	// BaseCommit is, in a git-native project, the commit of the
	// operator's repository the task's workspace starts from (repo:'s
	// commit, or the merge and the integration phase's commits).
	BaseCommit string
	// ReusedFrom is, for a task whose result an earlier run made and this
	// run reuses, that run's number; 0 when the task runs in this run.
	ReusedFrom int
	// Sandbox is the task's sandbox: on, off, auto, or "" to leave it to
	// the node (front matter, else project.yaml).
	Sandbox string
	// Network is the task's network: open, none (it must run sandboxed),
	// or "" to leave it to the node (front matter, else project.yaml).
	Network string
	// Limits are the task's limits (front matter, else project.yaml);
	// the node's fill in the rest at launch.
	Limits yamlval.Limits
	// Env is added to the task's environment (front matter env:), values
	// as written: a ${VAR} is expanded from the controller's environment
	// at launch, like an api_mode's env, and never stored expanded.
	Env map[string]string
	// RetryBackoff is the task's own retry_backoff; 0 leaves it to the
	// controller's.
	RetryBackoff time.Duration
	// Files are copied into output/ before the tool starts (files:):
	// slash-separated paths relative to the spec file's directory, kept
	// at that path in output/.
	Files []string
	// StartFrom is start_from: inputs (""), dependencies or base: what
	// a plain project's task with dependencies receives of their outputs.
	StartFrom string
	// OnConflict is on_conflict: markers ("") or fail: what a conflict
	// between a git project's task's dependencies' results does.
	OnConflict string

	// Preemptions counts the attempts a more urgent task stopped
	// (preempted), which do not use up RetriesUsed either.
	Preemptions int
	// NotPreemptible is preemptible: false: no more urgent task stops it.
	NotPreemptible bool

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Attempt is one attempt of a task: its row in attempts.
type Attempt struct {
	Project     string
	Task        string
	Attempt     int
	Node        string
	Status      Status
	PID         int
	ExitCode    int
	Signal      string
	ErrorClass  string
	Error       string
	ClaimedAt   time.Time
	StartedAt   time.Time
	CompletedAt time.Time
	LogBytes    int64
	TokensIn    int64
	TokensOut   int64
	CostUSD     float64
	CollectedAt time.Time
	// Dangerous is set when the attempt ran with the tool's
	// permission-skipping flags.
	Dangerous bool
	// APIMode is the api_mode the attempt ran under ("" for none).
	APIMode string
	// SessionID is the tool's session as its output named it, for a
	// retry to resume.
	SessionID string
	// Commit is, in a git-native project, the commit the attempt's
	// workspace was recorded as when the tool exited.
	Commit string
	// Run is the project's run the attempt belongs to.
	Run int
	// Sandbox is how the attempt was confined: "bwrap", or "" for not
	// at all.
	Sandbox string
	// BaseCommit is, in a git-native project, the commit a stacked
	// attempt started on (its dependencies' results merged onto its
	// task's BaseCommit), or "": it started on its task's BaseCommit.
	BaseCommit string
	// SlurmJob is the id of the Slurm job that ran the attempt ("" for
	// another executor); Waiting why that job has not started yet.
	SlurmJob, Waiting string
	// Inputs is what the attempt ran from (spec, base, tool, model,
	// api_mode variables, its dependencies' results) as JSON: a later run
	// reuses the result while they are unchanged.
	Inputs string
	// Given is the result of each dependency the attempt received, as it
	// was when the attempt was claimed (Stale compares it with the
	// dependencies' results now).
	Given []Given
	// FinalMessage is what the agent CLI reported as its last word, at
	// most 4 KiB; its dependents' prompts carry it, fenced as data.
	FinalMessage string
}

// DefaultTimeout bounds a task that sets no timeout (the wrapper's
// wire.DefaultTimeoutSeconds).
const DefaultTimeout = time.Hour

// DefaultStallTimeout stops a tool that writes nothing for this long, unless
// the task, project or node says otherwise.
const DefaultStallTimeout = 15 * time.Minute

// StallTimeout is the task's stall_timeout: its own (front matter, else
// project.yaml's), else the project's for a generated phase task, else the
// node's (nodeStall), else the default.
func StallTimeout(t Task, opts ProjectOptions, nodeStall time.Duration) time.Duration {
	for _, d := range []time.Duration{t.Stall, opts.Stall, nodeStall} {
		if d > 0 {
			return d
		}
	}
	return DefaultStallTimeout
}
