package wire

import "strings"

// Values of ErrorReply.Kind.
const (
	KindUsage          = "usage"
	KindAlreadyRunning = "already_running"
	KindNotFound       = "not_found"
	KindIO             = "io"
	KindInternal       = "internal"
	// KindTooLarge is a `tar` whose files pass its --max-bytes.
	KindTooLarge = "too_large"
	// KindOtherNode is a `kill --node N` of a task directory whose attempt
	// is another node's (a work_dir two nodes share): nothing is signalled.
	KindOtherNode = "other_node"
)

// ErrorReply is printed on stdout, with exit status 1, when a subcommand
// fails. Kind is one of the Kind constants.
type ErrorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

// VersionReply is the reply of `version`.
type VersionReply struct {
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// SandboxReply is the reply of `sandbox`: whether bwrap works on the node
// for the node user. Sandbox is "bwrap" when it does; else Error says why
// and Fix what to do.
type SandboxReply struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path,omitempty"`
	Error   string `json:"error,omitempty"`
	Fix     string `json:"fix,omitempty"`
	// Limits is how the node enforces a task's limits: a cgroup version
	// and its controllers, EnforceRlimits or EnforceNone (see wrapper/limits.go).
	// Empty from a wrapper before limits.
	Limits string `json:"limits,omitempty"`
}

// Values of SandboxReply.Limits: how the node enforces limits. Where it
// has cgroups, the value is "cgroup v1 (cpu,memory,pids)" or "cgroup v2
// (cpu,memory,pids) at DIR", naming the controllers the cgroups enforce
// (see EnforcementControllers); the watchdog enforces memory and pids
// where they are not named, and cpu is not enforced where it is not.
const (
	// EnforceRlimits: RLIMIT_FSIZE (and RLIMIT_NPROC), and the watchdog
	// for memory and pids; cpu is not enforced.
	EnforceRlimits = "rlimits+watchdog"
	// EnforceNone: the node cannot enforce limits (not Linux).
	EnforceNone = "none"
)

// EnforcementControllers lists the controllers a cgroup enforcement (a
// SandboxReply.Limits) names: ["cpu", "memory"] for "cgroup v1
// (cpu,memory)"; nil for any other.
func EnforcementControllers(enforcement string) []string {
	rest, ok := strings.CutPrefix(enforcement, "cgroup v")
	if !ok {
		return nil
	}
	_, rest, ok = strings.Cut(rest, "(")
	list, _, ok2 := strings.Cut(rest, ")")
	if !ok || !ok2 || list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// WhichReply is the reply of `which`: where each name asked for was found,
// and the PATH searched.
type WhichReply struct {
	Found map[string]string `json:"found"`
	Path  string            `json:"path"`
	// Sandbox says whether the sandbox works on the node (see `sandbox`).
	Sandbox *SandboxReply `json:"sandbox,omitempty"`
	// SandboxRefused says, by name, why an attempt's sandbox on the node
	// could not run an executable found (it lies under /tmp, or in a
	// directory the sandbox hides, with the fix); asked of the installed
	// wrapper where the sandbox works, nil otherwise.
	SandboxRefused map[string]string `json:"sandbox_refused,omitempty"`
}

// GitReply is the reply of `git-receive` and `git-have`.
type GitReply struct {
	// Commits are the base commits the node's repository holds.
	Commits []string `json:"commits"`
}

// PackReply is the reply of `git-pack`.
type PackReply struct {
	Commit string `json:"commit"`
	Bytes  int64  `json:"bytes"`
}
