package wire

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

// Defaults for zero fields of Launch.
const (
	DefaultTimeoutSeconds   = 3600
	DefaultGraceSeconds     = 30
	DefaultHeartbeatSeconds = 10
	DefaultLogLimitBytes    = 64 << 20
)

// InputsDir is the directory of a task directory that holds its
// dependencies' outputs, one directory per dependency (Launch.Inputs).
const InputsDir = "inputs"

// Launch is launch.json, pushed by the controller into the task directory
// before `run`. It never holds secrets. Zero numbers mean the defaults.
type Launch struct {
	Project string `json:"project"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	Node    string `json:"node"`
	// Priority is the task's (1 first, 9 last; 0 unknown): a batch
	// system's executor maps it to the cluster's own (Slurm's QoS).
	Priority int `json:"priority,omitempty"`
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
	// Inputs, when true, says the task directory's inputs/ (pushed by the
	// controller, or copied on the node by `wrapper inputs`) holds its
	// dependencies' outputs: the tool sees its path in DISPATCH_INPUTS,
	// read-only under the sandbox.
	Inputs bool `json:"inputs,omitempty"`
	// Repo, when set, makes output/ a git workspace of a git-native
	// project instead (Base must then be empty).
	Repo *LaunchRepo `json:"repo,omitempty"`
	// Sandbox is "bwrap" to run setup and the tool under bubblewrap (the
	// attempt fails with class start where it does not work), "auto" to
	// do so where it works, "" never (see wrapper/sandbox.go).
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
	// sandboxed or not (see wrapper/limits.go).
	Limits *Limits `json:"limits,omitempty"`
	// Network is the task's network: NetworkOpen ("" too) or NetworkNone
	// (only a loopback of its own, under bwrap's --unshare-net). An
	// attempt with NetworkNone that does not really run sandboxed fails
	// to start: it never runs with the network open by mistake.
	Network string `json:"network,omitempty"`
	// NetworkAllow, with Network NetworkAllow, are the host:port the
	// attempt may reach (see wrapper/netproxy.go); the controller has added what
	// the tool needs.
	NetworkAllow []string `json:"network_allow,omitempty"`
	// NetworkDefault, with Network NetworkAllow, says the list is the
	// default of an agent under the sandbox, not a setting (issue 32):
	// where the attempt does not really run under bwrap (Sandbox "auto"
	// on a node where it does not work) it runs with the node's network,
	// as an unconfined agent always did, instead of failing to start.
	NetworkDefault bool `json:"network_default,omitempty"`
	// Gate, when set, is run by the supervisor on the attempt's result
	// once the tool ended well (see wrapper/gate.go).
	Gate *LaunchGate `json:"gate,omitempty"`
}

// LaunchGate is a gate command (project.yaml's gate:) run on an
// attempt's result: in a fresh copy of it (gate/ in the task directory:
// a checkout of the result commit in a git-native project, a copy of
// output/ otherwise), after the launch's setup, under the attempt's
// sandbox, limits and network, by /bin/sh -c, within TimeoutSeconds.
type LaunchGate struct {
	Command        string  `json:"command"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// Decides makes a failed gate fail the attempt (error_class gate): a
	// task gate. Without it the result is only reported: the project
	// gate after S99 or a fix round, which the phase machine reads.
	Decides bool `json:"decides,omitempty"`
	// Known are this command's results on trees it ran on before (an
	// earlier attempt's): a result of the same tree is taken as it is,
	// not run again.
	Known []GateResult `json:"known,omitempty"`
}

// GateResult is what a gate run found. The wrapper reports it from the
// supervisor's private record, never from status.json, which the task can
// rewrite.
type GateResult struct {
	// Tree is what was gated: "git:<tree id>" of the result commit, or
	// "sha256:<digest of every path, mode and content>" of output/.
	Tree     string  `json:"tree"`
	Passed   bool    `json:"passed"`
	ExitCode int     `json:"exit_code"`
	Seconds  float64 `json:"seconds"`
	// OutputTail is the end of what setup and the command printed: the
	// last GateTailLines lines, at most GateTailBytes.
	OutputTail string `json:"output_tail"`
	// Error says why the gate did not pass besides its exit status: it
	// timed out, could not start, or its checkout could not be made.
	Error string `json:"error,omitempty"`
	// Missing is set when the command was not found (exit 127): no retry
	// of the attempt can help.
	Missing bool `json:"missing,omitempty"`
	// Reused is set when the result is one of LaunchGate.Known.
	Reused bool `json:"reused,omitempty"`
}

// Bounds of GateResult.OutputTail.
const (
	GateTailLines = 200
	GateTailBytes = 64 << 10
)

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
	// for the next launches (see the wrapper's git-spare).
	Spares int `json:"spares,omitempty"`
}

// SandboxPaths are paths bound into the sandbox: RO read-only, RW
// read-write. Each is absolute or starts with ~/ (the node user's home),
// clean, and neither / nor the home.
type SandboxPaths struct {
	RO []string `json:"ro,omitempty"`
	RW []string `json:"rw,omitempty"`
}

// Limits is launch.json's limits; zero fields are not limited.
type Limits struct {
	MemoryBytes   int64   `json:"memory_bytes,omitempty"`
	CPU           float64 `json:"cpu,omitempty"`
	Pids          int     `json:"pids,omitempty"`
	FileSizeBytes int64   `json:"file_size_bytes,omitempty"`
}

// Values of Launch.Sandbox and Status.Sandbox.
const (
	// SandboxBwrap: the attempt must run under bwrap (status: it did).
	SandboxBwrap = "bwrap"
	// SandboxAuto: under bwrap when it works on the node, else without.
	SandboxAuto = "auto"
)

// Values of Launch.Network.
const (
	// NetworkOpen: the attempt has the node's network (the default).
	NetworkOpen = "open"
	// NetworkNone: only a loopback of its own; needs the sandbox.
	NetworkNone = "none"
)

// NetworkAllow is launch.json's network of an attempt with an allow list
// (Launch.NetworkAllow); like NetworkNone, it needs the sandbox.
const NetworkAllow = "allow"

// LaunchBatch is the document `launch` reads on stdin.
type LaunchBatch struct {
	Launches []LaunchItem `json:"launches"`
}

// LaunchItem is one attempt to start.
type LaunchItem struct {
	// Dir is the absolute task directory; it is created when missing.
	Dir string `json:"dir"`
	// Spec is written to spec.md (read-only).
	Spec string `json:"spec"`
	// Launch is written to launch.json.
	Launch Launch `json:"launch"`
	// Env is the api_mode's environment, for the tool only.
	Env map[string]string `json:"env,omitempty"`
}

// LaunchReply is what `launch` prints.
type LaunchReply struct {
	Results []LaunchResult `json:"results"`
}

// LaunchResult is one attempt's outcome: Run when its supervisor started,
// else Error and Kind (already_running when a live supervisor holds the
// directory: the attempt may have been started by an earlier call).
type LaunchResult struct {
	Dir   string    `json:"dir"`
	Run   *RunReply `json:"run,omitempty"`
	Error string    `json:"error,omitempty"`
	Kind  string    `json:"kind,omitempty"`
}

// RunReply is the reply of `run` once the supervisor holds the attempt
// (its lock taken, its live marker written): PID is the supervisor's, and
// status.json follows.
type RunReply struct {
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid"`
	Status  string `json:"status"`
}
