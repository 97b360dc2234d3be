package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values of Status.Status.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusKilled    = "killed"
)

// Values of Status.ErrorClass.
const (
	ClassExit      = "exit"
	ClassCrash     = "crash"
	ClassTimeout   = "timeout"
	ClassRateLimit = "rate_limit"
	ClassAuth      = "auth"
	ClassStart     = "start"
	// ClassStartPermanent: a start failure that no retry mends: the tool
	// cannot run under the sandbox (it lies under /tmp, or where the
	// sandbox hides it), or the launch asks for what cannot be (network
	// limits without the sandbox, a task directory outside work_dir, bad
	// sandbox_paths). Not retried; the error names the fix.
	ClassStartPermanent = "start_permanent"
	ClassKilled         = "killed"
	// ClassStalled: the tool wrote nothing (task.log, its transcript) for
	// the launch's stall_seconds; the supervisor stopped it.
	ClassStalled = "stalled"
	// ClassOOM: the attempt's processes passed its memory limit; the
	// watchdog killed them (see wrapper/limits.go). Not retried: it would need
	// the same memory again.
	ClassOOM = "oom"
	// ClassPids: the attempt's processes and threads passed its pids
	// limit; the watchdog killed them. Not retried either.
	ClassPids = "pids"
	// ClassGate: the tool ended well but the task gate (launch.json's
	// gate, Decides) did not pass.
	ClassGate = "gate"
	// ClassHung is the controller's, never in status.json: the wrapper was
	// alive but its heartbeat did not change for heartbeat_timeout.
	ClassHung = "hung"
)

// Status is status.json, written atomically by the supervisor.
//
// PID is the supervisor's pid. ToolPID is the tool's pid and process group;
// while Setup runs it is the setup shell's, so that a later attempt can kill
// whatever this one left behind. ExitCode is -1 when the tool did not exit on
// its own (killed by a signal, never started).
type Status struct {
	Task           string `json:"task"`
	Attempt        int    `json:"attempt"`
	Status         string `json:"status"`
	PID            int    `json:"pid"`
	ToolPID        int    `json:"tool_pid"`
	StartedAt      string `json:"started_at"`
	CompletedAt    string `json:"completed_at"`
	ExitCode       int    `json:"exit_code"`
	Signal         string `json:"signal"`
	Error          string `json:"error"`
	ErrorClass     string `json:"error_class"`
	WrapperVersion string `json:"wrapper_version"`
	LogBytes       int64  `json:"log_bytes"`
	// TokensIn, TokensOut and CostUSD are what the tool reported about its
	// usage in task.log (see wrapper.ParseUsage), filled in when the tool ends.
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
	// RetryAfterSeconds is set with ErrorClass rate_limit when the log says
	// when the limit resets (see wrapper.ParseRetryAfter): the seconds to wait from
	// the moment the tool ended, measured on the node's clock, so that the
	// controller can wait that long from when it reads the status without
	// comparing clocks. 0 means unknown.
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// SessionID is the tool's session as its output named it (claude's and
	// gemini's init event, codex's thread.started), for a later attempt to
	// resume.
	SessionID string `json:"session_id,omitempty"`
	// ToolMissing is set with ErrorClass start when the tool's executable
	// is not in its PATH on the node: the controller does not retry it.
	ToolMissing bool `json:"tool_missing,omitempty"`
	// Commit is a git-native task's result: what its workspace held when
	// the tool ended well, as one commit on its base (launch.json's repo).
	Commit string `json:"commit,omitempty"`
	// Sandbox is how the attempt was confined: "bwrap", or "" for not at
	// all.
	Sandbox string `json:"sandbox"`
	// Gate is the result of launch.json's gate, once it ran (see
	// GateResult); `status` takes it from the supervisor's record.
	Gate *GateResult `json:"gate,omitempty"`
	// Gating is set, with Status running, while the gate runs.
	Gating bool `json:"gating,omitempty"`
	// FinalMessage is what the agent CLI reported as its last word
	// (claude's result, codex's last agent message, gemini's last reply),
	// at most MaxFinalMessage bytes; "" for a tool that is no agent CLI.
	// It is the task's text: its dependents' prompts carry it as data.
	FinalMessage string `json:"final_message,omitempty"`
}

// MaxFinalMessage bounds Status.FinalMessage.
const MaxFinalMessage = 4 << 10

// finalCut ends a final message cut at MaxFinalMessage.
const finalCut = "\n[… cut: the message was longer than 4 KiB]"

// ClampMessage is s as Status.FinalMessage holds it: valid UTF-8, no
// control characters but newlines and tabs, nothing that shows other than
// its bytes say (see messageRune), at most MaxFinalMessage bytes (the
// start kept, the cut said).
func ClampMessage(s string) string {
	s = strings.Map(messageRune, strings.ToValidUTF8(s, ""))
	s = strings.TrimSpace(s)
	if len(s) <= MaxFinalMessage {
		return s
	}
	n := MaxFinalMessage - len(finalCut)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + finalCut
}

// messageRune is r as a message keeps it, -1 to drop it. A message is
// read by a dependent's agent and by the operator: what would make the
// two read different texts goes. Control characters but newline and tab;
// format characters (Unicode Cf: the bidi overrides, embeddings, isolates
// and marks that show a line reordered, zero-width spaces and joiners,
// the soft hyphen, the tag characters that spell text no one sees); the
// variation selectors of the supplement, which carry no glyph. A line or
// paragraph separator is the newline it stands for.
func messageRune(r rune) rune {
	switch {
	case r == '\n' || r == '\t':
		return r
	case r == '\u2028' || r == '\u2029':
		return '\n'
	case unicode.IsControl(r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Variation_Selector, r) && r > 0xffff:
		return -1
	}
	return r
}

// Final reports whether the attempt is over (anything but running).
func (s *Status) Final() bool {
	return s != nil && s.Status != "" && s.Status != StatusRunning
}

// Facts describes the node's spare capacity at the time of a `status` call.
type Facts struct {
	OS                string  `json:"os"`
	Arch              string  `json:"arch"`
	MemAvailableBytes int64   `json:"mem_available_bytes"`
	Load1             float64 `json:"load1"`
	DiskFreeBytes     int64   `json:"disk_free_bytes"`
}

// TaskStatus is one task directory as seen by `status`. Status is nil and
// StatusError says why when status.json is missing or does not parse. Alive
// is true when a supervisor holds the task's lock.
type TaskStatus struct {
	Project     string  `json:"project"`
	Task        string  `json:"task"`
	Dir         string  `json:"dir"`
	Status      *Status `json:"status"`
	StatusError string  `json:"status_error"`
	Heartbeat   string  `json:"heartbeat"`
	Alive       bool    `json:"alive"`
	// ToolRunning is set when the status is final but the tool's process
	// group, as the supervisor's private record names it, still has a
	// member in the supervisor's session: the task forged its end (or its
	// supervisor has not ended the group yet). Only a final status of a
	// live supervisor is checked.
	ToolRunning bool `json:"tool_running,omitempty"`
	// Waiting says why the attempt has not started yet, when its executor
	// knows (a batch job's pending reason: "Slurm job 7 PENDING:
	// Resources"); status shows it.
	Waiting string `json:"waiting,omitempty"`
	// SlurmJob is the id of the attempt's Slurm job while it waits or
	// runs (the executor's, never the wrapper's).
	SlurmJob string `json:"slurm_job,omitempty"`
	// Again says why the attempt ended before it started, for a cause
	// outside it (a batch job cancelled by an administrator, a node
	// failure, a preemption): it runs again without using a retry.
	Again string `json:"again,omitempty"`
	// Tag is the wrapper's digest of the entry but for its heartbeat (see
	// SetTag): a controller that holds an entry of this tag is told only
	// the heartbeat of a task whose entry is still the same
	// (LiveRequest.Tags, NodeStatus.Same).
	Tag string `json:"tag,omitempty"`
}

// SetTag sets t.Tag from every field but Heartbeat and Tag.
func (t *TaskStatus) SetTag() {
	c := *t
	c.Heartbeat, c.Tag = "", ""
	data, err := json.Marshal(&c)
	if err != nil {
		t.Tag = ""
		return
	}
	sum := sha256.Sum256(data)
	t.Tag = hex.EncodeToString(sum[:12])
}

// NodeStatus is the reply of `status`: every task of the node in one value.
type NodeStatus struct {
	WrapperVersion string       `json:"wrapper_version"`
	Time           string       `json:"time"`
	Facts          Facts        `json:"facts"`
	Tasks          []TaskStatus `json:"tasks"`
	// Listing is ListingLive when Tasks are only the live index's and the
	// named ones (`status --live`), empty when they are every task.
	Listing string `json:"listing,omitempty"`
	// Same lists, in a live reply, the named tasks whose entries are the
	// ones the request held (LiveRequest.Tags) but for the heartbeat: the
	// controller keeps what it holds and takes the heartbeat from here,
	// so that a steady reply carries what changed, not every live task.
	Same *Same `json:"same,omitempty"`
	// Unlisted names, in a reply of either listing, the projects whose
	// tasks directory could not be listed (an unconfined task can chmod
	// it), each with why; the other projects are listed as usual. What
	// could be read of such a project by name is in Tasks: a task of it
	// that Tasks lacks is unknown, neither gone nor ended. An older
	// wrapper never sends it (it failed the whole call instead); an older
	// controller ignores it.
	Unlisted []Unlisted `json:"unlisted,omitempty"`
}

// Unlisted is a project a status call could not list: its tasks
// directory and why.
type Unlisted struct {
	Project string `json:"project"`
	Dir     string `json:"dir"`
	Error   string `json:"error"`
}

// MaxUnlistedText bounds each string of an Unlisted as ClampUnlisted
// leaves it.
const MaxUnlistedText = 512

// ClampUnlisted makes each string of ns.Unlisted one line an operator
// may be shown (see ClampMessage) of at most MaxUnlistedText bytes: the
// node wrote them.
func (ns *NodeStatus) ClampUnlisted() {
	for i := range ns.Unlisted {
		u := &ns.Unlisted[i]
		u.Project, u.Dir, u.Error = clampLine(u.Project), clampLine(u.Dir), clampLine(u.Error)
	}
}

// clampLine is s as ClampMessage keeps it, on one line, cut to
// MaxUnlistedText bytes at a character's start.
func clampLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, ClampMessage(s))
	if len(s) <= MaxUnlistedText {
		return s
	}
	n := MaxUnlistedText - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Same is the tasks ("project/ID") whose status entries have the tags
// the controller holds, and their current heartbeats in the same order:
// two lists of strings, which decode at a fraction of the cost of as
// many objects.
type Same struct {
	Tasks      []string `json:"tasks"`
	Heartbeats []string `json:"heartbeats"`
}

// Add appends a task and its heartbeat.
func (s *Same) Add(task, heartbeat string) {
	s.Tasks = append(s.Tasks, task)
	s.Heartbeats = append(s.Heartbeats, heartbeat)
}

// Len is the number of tasks in s (0 for nil, or lists of unequal
// length, which no wrapper writes).
func (s *Same) Len() int {
	if s == nil || len(s.Tasks) != len(s.Heartbeats) {
		return 0
	}
	return len(s.Tasks)
}

// ListingLive is NodeStatus.Listing for a reply of `status --live`.
const ListingLive = "live"

// StatusRequest is one request of `status --serve`, one line of its stdin:
// the projects to list (every one when none) and, with Live, what `status
// --live` reads on its stdin. The reply is one line: the NodeStatus that
// `status` would print for the same flags.
type StatusRequest struct {
	Projects []string `json:"projects,omitempty"`
	Live     bool     `json:"live,omitempty"`
	LiveRequest
}

// LiveRequest is what `status --live` reads on stdin: the tasks to report
// whatever the index says, as "project/ID".
type LiveRequest struct {
	Tasks []string `json:"tasks"`
	// Tags are, in the order of Tasks, the Tag of the entry the controller
	// holds for each named task ("" for none): an entry of that tag but
	// for its heartbeat is answered in NodeStatus.Same.
	Tags []string `json:"tags,omitempty"`
}

// Frame is one line of `watch`. A change frame names the tasks that
// changed and carries their status as `status` reports it (Statuses, in
// the order of Tasks), so that the controller needs no status call to act
// on it.
type Frame struct {
	Type     string       `json:"type"`
	Version  string       `json:"version,omitempty"`
	Tasks    []string     `json:"tasks,omitempty"`
	Statuses []TaskStatus `json:"statuses,omitempty"`
}

// Frame types.
const (
	FrameHello  = "hello"
	FrameChange = "change"
	FrameBeat   = "beat"
)

// Limits on the numbers a status carries. A status is written where the
// task can rewrite it, and reaches the controller through a node that may
// answer anything, so each number is brought into a sane range before it is
// used or summed.
const (
	// MaxRetryAfterSeconds bounds the pause a rate limit may ask for: a
	// day. A forged 9e9 would pause a shared api_mode for centuries.
	MaxRetryAfterSeconds = 24 * 60 * 60
	// MaxCostUSD bounds one attempt's cost, far above anything real, so
	// that sums over many attempts stay finite.
	MaxCostUSD = 1e9
)

// Clamp brings s's numbers into range: no NaN or infinity, nothing
// negative that counts something, retry_after_seconds at most a day,
// cost at most MaxCostUSD.
func (s *Status) Clamp() {
	s.RetryAfterSeconds = clampFloat(s.RetryAfterSeconds, MaxRetryAfterSeconds)
	s.CostUSD = clampFloat(s.CostUSD, MaxCostUSD)
	s.TokensIn = max(s.TokensIn, 0)
	s.TokensOut = max(s.TokensOut, 0)
	s.LogBytes = max(s.LogBytes, 0)
	// A session id goes back into a tool's command line: only a sane one.
	if !IsSessionID(s.SessionID) {
		s.SessionID = ""
	}
	// A result commit is a commit id or nothing.
	if s.Commit != "" && !IsCommitID(s.Commit) {
		s.Commit = ""
	}
	// A sandbox is a known word or nothing.
	if s.Sandbox != SandboxBwrap {
		s.Sandbox = ""
	}
	s.FinalMessage = ClampMessage(s.FinalMessage)
	if g := s.Gate; g != nil {
		g.Seconds = clampFloat(g.Seconds, 1e9)
		// The output goes into a retry's environment, where no NUL can.
		g.OutputTail = strings.ReplaceAll(LastBytes(g.OutputTail, GateTailBytes), "\x00", "")
		g.Error = strings.ReplaceAll(LastBytes(g.Error, 4096), "\x00", "")
		if len(g.Tree) > 128 {
			g.Tree = ""
		}
	}
}

// LastBytes is the end of s, at most n bytes, cut at a line start when
// it had to be cut.
func LastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Clamp brings the node's facts into range.
func (f *Facts) Clamp() {
	f.MemAvailableBytes = max(f.MemAvailableBytes, 0)
	f.DiskFreeBytes = max(f.DiskFreeBytes, 0)
	f.Load1 = clampFloat(f.Load1, math.MaxFloat32)
}

// clampFloat is v within [0, hi], and 0 for NaN.
func clampFloat(v, hi float64) float64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v > hi:
		return hi
	}
	return v
}

// IsSessionID reports whether s has the shape of a session id dispatch
// passes back to a tool: an ASCII letter or digit, then up to 127 more or
// '_' and '-' (`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`). It is a loop, not a
// regexp: that one's 128 counted repeats took every process that imports
// wire 0.4 ms and 1,700 allocations to compile at start-up.
func IsSessionID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// IsCommitID reports whether s is a full SHA-1 or SHA-256 hex object id:
// what a node may name as a commit (a name would resolve elsewhere).
func IsCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
