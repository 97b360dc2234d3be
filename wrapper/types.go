package wrapper

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/internal/netallow"
)

// Version is the wrapper's version, reported by `version` and written into
// every status.json. Release builds set it with
// -ldflags "-X github.com/dispatch-tool/dispatch/wrapper.Version=...".
var Version = "dev"

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
	ClassKilled    = "killed"
	// ClassStalled: the tool wrote nothing (task.log, its transcript) for
	// the launch's stall_seconds; the supervisor stopped it.
	ClassStalled = "stalled"
	// ClassOOM: the attempt's processes passed its memory limit; the
	// watchdog killed them (see limits.go). Not retried: it would need
	// the same memory again.
	ClassOOM = "oom"
	// ClassPids: the attempt's processes and threads passed its pids
	// limit; the watchdog killed them. Not retried either.
	ClassPids = "pids"
	// ClassHung is the controller's, never in status.json: the wrapper was
	// alive but its heartbeat did not change for heartbeat_timeout.
	ClassHung = "hung"
)

// Agents are the agent CLIs whose structured output the wrapper reads
// (Launch.Agent).
var Agents = []string{AgentClaude, AgentCodex, AgentGemini}

// Values of Launch.Agent.
const (
	AgentClaude = "claude"
	AgentCodex  = "codex"
	AgentGemini = "gemini"
)

// IsAgent reports whether tool is one of the agent CLIs: a tool by that
// name, built in or defined in nodes.yaml, is trusted to print its own
// usage and rate-limit resets; any other tool's output is the task's.
func IsAgent(tool string) bool {
	return tool == AgentClaude || tool == AgentCodex || tool == AgentGemini
}

// Values of ErrorReply.Kind.
const (
	KindUsage          = "usage"
	KindAlreadyRunning = "already_running"
	KindNotFound       = "not_found"
	KindIO             = "io"
	KindInternal       = "internal"
	// KindTooLarge is a `tar` whose files pass its --max-bytes.
	KindTooLarge = "too_large"
)

// Defaults for zero fields of Launch.
const (
	DefaultTimeoutSeconds   = 3600
	DefaultGraceSeconds     = 30
	DefaultHeartbeatSeconds = 10
	DefaultLogLimitBytes    = 64 << 20
)

// maxResumePrompt bounds launch.json's resume_prompt: it goes through a
// pipe the wrapper writes without waiting.
const maxResumePrompt = 4096

// minLogLimit keeps room for the cut marker and a useful tail.
const minLogLimit = 1024

// Launch is launch.json, pushed by the controller into the task directory
// before `run`. It never holds secrets. Zero numbers mean the defaults.
type Launch struct {
	Project string `json:"project"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	Node    string `json:"node"`
	// Command is argv; Command[0] is looked up in the tool environment's
	// PATH and every "{spec}" in an argument becomes the path of spec.md.
	Command []string `json:"command"`
	// Stdin is "spec" to feed spec.md to the tool, "resume" to feed it
	// ResumePrompt, or "" for /dev/null.
	Stdin string `json:"stdin"`
	// Resume is set when the attempt continues the tool's session of the
	// attempt before it (stopped by a rate limit or a stall): the earlier
	// output/ stays in place as the workspace instead of moving aside, and
	// the tool gets ResumePrompt.
	Resume       bool   `json:"resume,omitempty"`
	ResumePrompt string `json:"resume_prompt,omitempty"`
	// TimeoutSeconds counts from the start of the attempt, setup included.
	TimeoutSeconds   float64 `json:"timeout_seconds"`
	GraceSeconds     float64 `json:"grace_seconds"`
	HeartbeatSeconds float64 `json:"heartbeat_seconds"`
	// LogLimitBytes caps task.log; values below 1 KiB are raised to 1 KiB
	// so that the cut marker and a useful tail fit.
	LogLimitBytes int64 `json:"log_limit_bytes"`
	// StallSeconds stops the tool as stalled when it writes nothing for
	// this long; 0 never does.
	StallSeconds float64 `json:"stall_seconds,omitempty"`
	// Transcript names the tool whose transcript counts as writing too
	// (only "claude" is known).
	Transcript string `json:"transcript,omitempty"`
	// Agent names the agent CLI the tool is (one of Agents): only its own
	// structured events are read for usage, cost and a rate limit's reset.
	// "" for any other tool (shell, one of nodes.yaml's), whose output is
	// the task's to write and never read for numbers.
	Agent string `json:"agent,omitempty"`
	// Env is the tool's own settings (the variables that keep an agent CLI
	// offline, non-interactive and its retries bounded): applied over the
	// node user's environment, under the api_mode's variables on stdin.
	// Never secrets.
	Env map[string]string `json:"env,omitempty"`
	// Setup, when non-empty, is run by /bin/sh -c in output/ before the tool.
	Setup string `json:"setup"`
	// Base, when non-empty, is a directory relative to the task directory
	// (uploaded by the controller) whose tree is copied into a fresh output/
	// before setup and the tool. It stays in place for later attempts.
	Base string `json:"base"`
	// Repo, when set, makes output/ a git workspace of a git-native
	// project instead (Base must then be empty).
	Repo *LaunchRepo `json:"repo,omitempty"`
	// Sandbox is "bwrap" to run setup and the tool under bubblewrap (the
	// attempt fails with class start where it does not work), "auto" to
	// do so where it works, "" never (see sandbox.go).
	Sandbox string `json:"sandbox,omitempty"`
	// WorkDir is the node's work_dir, which the sandbox hides but for the
	// attempt's own files; required with Sandbox.
	WorkDir string `json:"work_dir,omitempty"`
	// SandboxCommand, when set, replaces Command where the attempt really
	// runs under bwrap (Sandbox "auto" on a node where it works): an agent
	// CLI with its own approval prompts off, confined by the sandbox
	// instead. SandboxEnv is then set over the tool's environment.
	// SandboxPaths are the node's paths opened into the sandbox (its
	// sandbox_paths): each absolute or ~/... (the node user's home).
	SandboxPaths   *SandboxPaths     `json:"sandbox_paths,omitempty"`
	SandboxCommand []string          `json:"sandbox_command,omitempty"`
	SandboxEnv     map[string]string `json:"sandbox_env,omitempty"`
	// Limits, when set, bounds the resources of setup and the tool,
	// sandboxed or not (see limits.go).
	Limits *Limits `json:"limits,omitempty"`
	// Network is the task's network: NetworkOpen ("" too) or NetworkNone
	// (only a loopback of its own, under bwrap's --unshare-net). An
	// attempt with NetworkNone that does not really run sandboxed fails
	// to start: it never runs with the network open by mistake.
	Network string `json:"network,omitempty"`
	// NetworkAllow, with Network NetworkAllow, are the host:port the
	// attempt may reach (see netproxy.go); the controller has added what
	// the tool needs.
	NetworkAllow []string `json:"network_allow,omitempty"`
}

// LaunchRepo is a git-native task's workspace: output/ becomes a clone of
// the node's repository Dir (<work_dir>/<project>/repo.git) on the new
// branch Branch at commit Base; when the tool ends well, what output/
// holds is recorded as one commit on Base (status.json's commit), with
// Message, for `git-pack` to send.
type LaunchRepo struct {
	Dir     string `json:"dir"`
	Base    string `json:"base"`
	Branch  string `json:"branch"`
	Message string `json:"message,omitempty"`
	// Spares, when positive, lets the workspace be a spare checkout of
	// Base made after an earlier launch, and keeps up to that many ready
	// for the next launches (see git-spare).
	Spares int `json:"spares,omitempty"`
}

func (r *LaunchRepo) check() error {
	if !filepath.IsAbs(r.Dir) || filepath.Clean(r.Dir) != r.Dir || filepath.Base(r.Dir) != "repo.git" {
		return fmt.Errorf("repo.dir %q: want an absolute, clean path ending in repo.git", r.Dir)
	}
	if !IsCommitID(r.Base) {
		return fmt.Errorf("repo.base %q is not a full commit id", r.Base)
	}
	if r.Spares < 0 || r.Spares > 64 {
		return fmt.Errorf("repo.spares %d: want 0 to 64", r.Spares)
	}
	if !strings.HasPrefix(r.Branch, "dispatch/") || strings.Contains(r.Branch, "..") || strings.ContainsAny(r.Branch, " ~^:?*[\\\x00") || strings.HasSuffix(r.Branch, "/") {
		return fmt.Errorf("repo.branch %q: want a branch name under dispatch/", r.Branch)
	}
	return nil
}

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
	// usage in task.log (see ParseUsage), filled in when the tool ends.
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
	// RetryAfterSeconds is set with ErrorClass rate_limit when the log says
	// when the limit resets (see ParseRetryAfter): the seconds to wait from
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
}

// RunReply is the reply of `run` once the supervisor is up.
type RunReply struct {
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid"`
	Status  string `json:"status"`
}

// VersionReply is the reply of `version`.
type VersionReply struct {
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// ErrorReply is printed on stdout, with exit status 1, when a subcommand
// fails. Kind is one of the Kind constants.
type ErrorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

// SandboxPaths are paths bound into the sandbox: RO read-only, RW
// read-write. Each is absolute or starts with ~/ (the node user's home),
// clean, and neither / nor the home.
type SandboxPaths struct {
	RO []string `json:"ro,omitempty"`
	RW []string `json:"rw,omitempty"`
}

func (sp *SandboxPaths) check() error {
	if sp == nil {
		return nil
	}
	for _, p := range append(append([]string{}, sp.RO...), sp.RW...) {
		rest, home := strings.CutPrefix(p, "~/")
		if !home {
			rest = strings.TrimPrefix(p, "/")
		}
		if (!home && !filepath.IsAbs(p)) || rest == "" || filepath.Clean("/"+rest) != "/"+rest {
			return fmt.Errorf("sandbox_paths: %q: want an absolute or ~/ path, clean, other than / and ~", p)
		}
	}
	return nil
}

// normalize fills in defaults and rejects what no attempt could run with.
func (l *Launch) normalize() error {
	if len(l.Command) == 0 || l.Command[0] == "" {
		return fmt.Errorf("command is empty")
	}
	switch l.Stdin {
	case "", "spec":
	case "resume":
		if !l.Resume || l.ResumePrompt == "" || len(l.ResumePrompt) > maxResumePrompt {
			return fmt.Errorf("stdin \"resume\" needs resume: true and a resume_prompt of 1 to %d bytes", maxResumePrompt)
		}
	default:
		return fmt.Errorf("stdin %q: want \"spec\", \"resume\" or \"\"", l.Stdin)
	}
	if len(l.SandboxCommand) > 0 && (l.SandboxCommand[0] == "" || l.Sandbox == "") {
		return fmt.Errorf("sandbox_command needs sandbox and a program")
	}
	if l.StallSeconds < 0 {
		return fmt.Errorf("negative stall_seconds")
	}
	if l.Agent != "" && !IsAgent(l.Agent) {
		return fmt.Errorf("agent %q: want one of %v or none", l.Agent, Agents)
	}
	switch l.Sandbox {
	case "":
	case SandboxBwrap, SandboxAuto:
		if !filepath.IsAbs(l.WorkDir) || filepath.Clean(l.WorkDir) != l.WorkDir || l.WorkDir == "/" {
			return fmt.Errorf("sandbox %q needs work_dir, an absolute, clean path other than /", l.Sandbox)
		}
	default:
		return fmt.Errorf("sandbox %q: want %q, %q or none", l.Sandbox, SandboxBwrap, SandboxAuto)
	}
	switch l.Network {
	case "", NetworkOpen, NetworkNone:
		if len(l.NetworkAllow) > 0 {
			return fmt.Errorf("network_allow needs network %q", NetworkAllow)
		}
	case NetworkAllow:
		if _, err := l.allowList(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("network %q: want %q, %q or %q", l.Network, NetworkOpen, NetworkNone, NetworkAllow)
	}
	if err := l.SandboxPaths.check(); err != nil {
		return err
	}
	if l.Limits != nil {
		if err := l.Limits.check(); err != nil {
			return err
		}
	}
	if err := checkBase(l.Base); err != nil {
		return err
	}
	if l.Repo != nil {
		if l.Base != "" {
			return fmt.Errorf("base and repo are exclusive")
		}
		if err := l.Repo.check(); err != nil {
			return err
		}
	}
	if l.Attempt < 0 || l.TimeoutSeconds < 0 || l.GraceSeconds < 0 || l.HeartbeatSeconds < 0 || l.LogLimitBytes < 0 {
		return fmt.Errorf("negative attempt, timeout, grace, heartbeat or log limit")
	}
	if l.Attempt == 0 {
		l.Attempt = 1
	}
	if l.TimeoutSeconds == 0 {
		l.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if l.GraceSeconds == 0 {
		l.GraceSeconds = DefaultGraceSeconds
	}
	if l.HeartbeatSeconds == 0 {
		l.HeartbeatSeconds = DefaultHeartbeatSeconds
	}
	if l.LogLimitBytes == 0 {
		l.LogLimitBytes = DefaultLogLimitBytes
	}
	if l.LogLimitBytes < minLogLimit {
		l.LogLimitBytes = minLogLimit
	}
	return nil
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// timestamp formats t as RFC 3339 UTC with milliseconds, as status.json wants.
func timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// allowList is NetworkAllow parsed.
func (l *Launch) allowList() (netallow.List, error) {
	var out netallow.List
	for _, s := range l.NetworkAllow {
		e, err := netallow.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("network_allow: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}
