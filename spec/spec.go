package spec

import (
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/schedule"
	"sort"
	"time"
)

// DefaultPriority is the priority of a task that does not set one.
const DefaultPriority = 5

// DefaultType is the type of a task when neither its front matter nor
// project.yaml sets one.
const DefaultType = "implementation"

// BuiltinTools are the tools dispatch knows without a tools: entry in
// nodes.yaml.
var BuiltinTools = []string{"claude", "codex", "gemini", "shell"}

// Types are the values allowed for a task's type.
var Types = []string{"implementation", "integration", "verification", "fix", "test_debug", "simple_fix"}

// Task is one task spec, with project.yaml defaults already applied.
type Task struct {
	ID    string // e.g. "S01"
	Slug  string // the file name after "<ID>-", without ".md"; may be empty
	Title string // first "# " heading of the body, else the slug with '-' as spaces, else the ID
	File  string // absolute path of the spec file

	Type  string // front matter, else project.yaml, else DefaultType
	Tool  string // front matter, else project.yaml, else "" (the controller picks the node's tool, else claude)
	Model string // front matter; "" when not set

	Priority  int           // 1 (first) .. 9; DefaultPriority when not set
	DependsOn []string      // IDs of tasks of the same project, without duplicates
	Timeout   time.Duration // front matter, else project.yaml, else 0 (the controller's default)
	Stall     time.Duration // stall_timeout: front matter, else project.yaml, else 0 (the node's, else the default)
	Sandbox   string        // on, off or auto: front matter, else project.yaml, else "" (the node's)
	Network   string        // open or none: front matter, else project.yaml, else "" (the node's, else open)
	// Limits bounds the task's resources: each limit of the front matter,
	// else of project.yaml; the controller fills in the node's for the rest.
	Limits     yamlval.Limits
	MaxRetries *int     // front matter, else project.yaml, else nil (the controller's default)
	Node       string   // pin to this node; "" when not pinned
	Tags       []string // the task needs nodes with all of these tags
	Context    []string // headings of the SHARED_CONTEXT.md sections in Snapshot, in order

	// Parent is, for a task a matrix or a broadcast made, the ID of its
	// spec (S01 for S01.2, S01@mac1 and S01.2@mac1); "" otherwise.
	Parent string
	// Vars are the matrix values substituted into this task, by key; nil
	// outside a matrix.
	Vars map[string]string
	// Broadcast is the spec's nodes: (all, or the nodes with some tags);
	// ExpandBroadcast replaces the task by one per eligible node.
	Broadcast *Broadcast
	// Env is added to the task's environment, values as written: ${VAR}
	// is expanded from the controller's environment at launch, like an
	// api_mode's env, and never stored expanded.
	Env map[string]string
	// RetryBackoff is the task's own retry_backoff; 0 leaves it to the
	// controller's.
	RetryBackoff time.Duration
	// Files are copied into the task's workspace (output/) before the tool
	// starts: paths relative to the spec directory, slash-separated (front
	// matter files:, else project.yaml's).
	Files []string
	// StartFrom is start_from: (domain.StartInputs, StartDependencies, StartBase),
	// front matter, else project.yaml, else "" (inputs).
	StartFrom string
	// OnConflict is on_conflict: (domain.ConflictMarkers, ConflictFail),
	// front matter, else project.yaml, else "" (markers); git projects only.
	OnConflict string
	// NotPreemptible is preemptible: false (front matter, else
	// project.yaml): a more urgent task never stops this one.
	NotPreemptible bool

	// Hash is the hex sha256 of the task's snapshot, the text given to
	// the tool, which Project.Snapshot reads again from the spec file:
	// Load keeps the hash of each spec, not its text. The snapshot's
	// format is part of the contract because Hash is compared across
	// versions of dispatch:
	//
	//  1. The file must be valid UTF-8. A leading byte order mark is removed,
	//     and CRLF and lone CR line ends become LF.
	//  2. The front matter (a first line "---" up to and including the next
	//     "---" line) is removed, and so is every "@context:" line outside
	//     fenced code blocks.
	//  3. Leading and trailing lines that are empty or only whitespace are
	//     removed; the remaining lines are joined with LF and end with
	//     exactly one LF. Nothing else inside the body changes (trailing
	//     spaces on a line are kept).
	//  4. For each selected context, in order (front matter "context" first,
	//     then "@context:" lines from top to bottom, each section once), an
	//     empty line is appended and then the section: its "## " heading
	//     line as written and every line up to the next "## " or "# "
	//     heading, normalised as in 1 and 3.
	//  5. In a task of a matrix, each {{key}} of the body (step 3's lines)
	//     is replaced by its value, in one pass, before step 4.
	Hash string
	// Size is the snapshot's length in bytes.
	Size int

	// text is the snapshot of a task dispatch writes itself (the
	// baseline), which has no spec file to read it from.
	text []byte
}

// ProjectConfig is project.yaml. Pointers are nil when the key is absent so
// the controller can fall back to nodes.yaml.
type ProjectConfig struct {
	Integration     *bool  // run the integration task (S99) after the author tasks
	Verification    *bool  // run verification (V01...) after integration
	MaxFixRounds    *int   // overrides controller.max_fix_rounds
	IntegrationSpec string // file, relative to the project directory, used instead of the generated S99

	Tool       string         // default tool of the project's tasks
	Type       string         // default type of the project's tasks
	Timeout    time.Duration  // default timeout of the project's tasks; 0 when not set
	Stall      time.Duration  // default stall_timeout of the project's tasks; 0 when not set
	Sandbox    string         // default sandbox of the project's tasks (on, off, auto); "" when not set
	Network    string         // default network of the project's tasks (open, none); "" when not set
	Limits     yamlval.Limits // default limits of the project's tasks (each over the node's)
	MaxRetries *int           // default max_retries of the project's tasks

	Base string // directory, relative to the project directory, copied into every task's output/
	// Files are the default files: of the project's tasks (paths relative
	// to the project directory), copied into each one's output/.
	Files []string
	// StartFrom is the default start_from: of its tasks; "" when not set.
	StartFrom string
	// OnConflict is the default on_conflict: of its tasks; "" when not set.
	OnConflict string
	// Preemptible is the default preemptible: of its tasks; nil when not
	// set (preemptible).
	Preemptible *bool
	// Repo is project.yaml's repo: as written (relative to the project
	// directory, or absolute), Ref its ref: ("" for HEAD), and Source what
	// they resolved to: the commit every author task starts from.
	Repo   string
	Ref    string
	Source *gitrepo.Source
	Setup  string // command run by /bin/sh in output/ before the tool
	Halt   struct {
		Fail int // stop launching after this many tasks failed for good; 0 never stops
	}
	// Budget stops launching once the project's recorded cost or tokens
	// reach it; zero fields are no limit.
	Budget Budget
	// Notify is where the project's messages go (run finished, api_mode
	// paused, budget reached); nil leaves it to nodes.yaml's notify.
	Notify *notify.Config
	// Schedule is when `dispatch serve` starts the project's runs; nil
	// for none.
	Schedule *schedule.Spec
	// Gate is the project's own checks, run by dispatch on the results;
	// nil for none.
	Gate *Gate
	// Retention is how many ended runs the project keeps, over
	// nodes.yaml's controller.retention when Set.
	Retention yamlval.Retention
}

// Gate is project.yaml's gate: commands dispatch runs on results by
// /bin/sh -c, exit 0 passing.
type Gate struct {
	// Task is run on each author task's result; a failure fails the
	// attempt (error_class gate).
	Task string
	// Project is run on the integrated result after S99 and after each
	// fix round.
	Project string
	// Timeout bounds each gate run (DefaultGateTimeout when not set).
	Timeout time.Duration
	// Baseline runs the project gate on the base before any task.
	Baseline bool
}

// Budget is project.yaml's budget: {usd: 20, tokens: 5000000,
// max_attempt_usd: 50}.
type Budget struct {
	USD    float64
	Tokens int64
	// MaxAttemptUSD is the most one attempt may be recorded as costing;
	// 0 is the default (domain.DefaultMaxAttemptUSD).
	MaxAttemptUSD float64
}

// Project is one loaded and validated project.
type Project struct {
	Name    string
	Dir     string // absolute path of specs/<Name>
	Config  ProjectConfig
	Tasks   []*Task  // sorted by ID (byte order, as SQL sorts them)
	Ignored []string // other entries of Dir that are neither tasks nor known files, e.g. "s01-lowercase.md"

	// shared and sections are SHARED_CONTEXT.md as Load read it: the
	// contexts Snapshot appends to a spec's body.
	shared   *sharedContext
	sections map[string]section
}

// Task returns the task with the given ID, or nil.
func (p *Project) Task(id string) *Task {
	i := sort.Search(len(p.Tasks), func(i int) bool { return p.Tasks[i].ID >= id })
	if i < len(p.Tasks) && p.Tasks[i].ID == id {
		return p.Tasks[i]
	}
	return nil
}
