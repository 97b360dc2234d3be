package store

import (
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Task statuses. See Legal for the transitions between them.
const (
	Pending   = "pending"
	Claimed   = "claimed"
	Running   = "running"
	Completed = "completed"
	Failed    = "failed"
	Blocked   = "blocked"
	Canceled  = "canceled"
	Lost      = "lost"
)

// Killed is the status of an attempt killed by the operator (attempts.status; the
// wrapper writes it too).
const Killed = "killed"

// Statuses lists every task status in display order.
var Statuses = []string{Pending, Claimed, Running, Completed, Failed, Blocked, Canceled, Lost}

// legal is the task state machine: legal[from] holds the statuses a task may
// move to. A retry goes failed → pending; a dispatch retry of a finished task
// goes completed/canceled → pending; a completed task whose outputs cannot be
// collected (over quota, transfer failing) goes completed → failed.
var legal = map[string][]string{
	Pending:   {Claimed, Blocked, Canceled},
	Claimed:   {Running, Completed, Failed, Pending, Lost, Canceled},
	Running:   {Completed, Failed, Lost, Canceled},
	Completed: {Pending, Failed},
	Failed:    {Pending, Blocked},
	Blocked:   {Pending, Canceled},
	Canceled:  {Pending},
	Lost:      {Pending, Failed, Canceled},
}

// Legal reports whether a task may move from one status to another.
func Legal(from, to string) bool {
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether a status ends a task's life unless an operator
// retries it.
func Terminal(status string) bool {
	return status == Completed || status == Failed || status == Blocked || status == Canceled
}

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
	Phase      string
	Result     string
	Options    string
	StartedAt  time.Time
	FinishedAt time.Time
	// FinalCommit is, in a git-native project, the commit of the result
	// (refs/heads/dispatch/<project>/final).
	FinalCommit string
	// Run is the number of the project's current run (1 for the first),
	// or of the archived run read through Store.AtRun.
	Run int
	// Problem is why the controller stopped the project, when an error of
	// its own kept it from going on (empty otherwise); resuming clears it.
	Problem string
}

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
	Status      string
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
	Limits    yamlval.Limits
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Attempt is one attempt of a task: its row in attempts.
type Attempt struct {
	Project     string
	Task        string
	Attempt     int
	Node        string
	Status      string
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
	// Inputs is what the attempt ran from (spec, base, tool, model,
	// api_mode variables, its dependencies' results) as JSON: a later run
	// reuses the result while they are unchanged.
	Inputs string
}

// Node is what the controller last learned about a node.
type Node struct {
	Name              string
	State             string
	LastSeen          time.Time
	OfflineSince      time.Time
	LastError         string
	OS                string
	Arch              string
	WrapperVersion    string
	MemAvailableBytes int64
	Load1             float64
	DiskFreeBytes     int64
	RTTMillis         float64
	UpdatedAt         time.Time
}

// Event is one entry of the append-only event log.
type Event struct {
	ID         int64
	Time       time.Time
	Project    string
	Task       string
	Attempt    int
	Kind       string
	FromStatus string
	ToStatus   string
	Node       string
	Message    string
}

// File is one collected output file.
type File struct {
	Project string
	Task    string
	Attempt int
	Path    string
	Size    int64
	SHA256  string
}
