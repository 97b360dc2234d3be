package limits

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// Resource limits (issue 20): launch.json's limits bound an attempt's setup
// and tool, sandboxed or not. Where the node user can write a cgroup (see
// cgroup.go), the attempt runs in cgroups of its own: cpu as a CFS quota
// (cores times the 100 ms period), memory as the cgroup's limit (swap
// included where the kernel accounts it; an OOM kill fails the attempt,
// class oom), pids as pids.max (a refused fork fails it, class pids). The
// supervisor's watchdog reads those counters every watchdogInterval and
// kills the attempt's whole cgroup, and reads them once more when the
// child has ended: the class does not depend on which process the kernel
// picked. The cgroups also catch what leaves the tool's tree and group.
//
// What no cgroup enforces (no writable cgroup, or a hierarchy missing),
// the wrapper enforces itself:
//
//   - file_size: RLIMIT_FSIZE, set on the child before it runs (see
//     LimitExecCommand): a write past it fails with EFBIG, or kills the
//     writer with SIGXFSZ (the shell's default). Always so.
//   - pids: the watchdog counts the threads of the attempt's processes
//     (its process tree and process group, from /proc) and kills the
//     attempt, class pids, when they pass the limit. For a user other than
//     root, RLIMIT_NPROC is set too, as a backstop against a fork bomb
//     faster than the watchdog's sampling; it counts every thread of the
//     node user (other tasks, the supervisor, a login shell), so it is set
//     to pids plus the threads the user runs when the attempt starts. Root
//     is never bound by RLIMIT_NPROC: there, the watchdog alone counts.
//     A fork the backstop refuses leaves no counter to read (a cgroup has
//     pids.events): the tool gets EAGAIN, and a shell or a runtime says so
//     and usually dies of it before the watchdog's next sample. So when the
//     backstop was set and the tool failed, its log's last lines naming a
//     refused fork or thread (ForkRefused) class the attempt pids: the
//     only per-user refusal of a fork the kernel makes is RLIMIT_NPROC, and
//     the wrapper set it for this attempt alone.
//   - memory: the watchdog sums the resident memory (RSS) of the same
//     processes every watchdogInterval and kills the attempt, class oom,
//     when it passes the limit. RSS counts a page shared by two processes
//     twice: the sum errs on the high side.
//   - cpu: accepted, not enforced: RLIMIT_CPU is seconds of CPU time, not
//     cores, and cores need a cgroup. `sandbox` (nodes check) says so.
//
// A process that leaves the attempt's tree and group (a double fork, then
// setsid) escapes the watchdog's count outside the sandbox; inside it, the
// sandbox's own pid namespace keeps every process in the tree.

// Why the watchdog stops an attempt: its processes went over their memory
// or pids limit.
const (
	ReasonOOM  = "oom"
	ReasonPids = "pids"
)

// CheckLimits rejects negative limits.
func CheckLimits(l *wire.Limits) error {
	if l.MemoryBytes < 0 || l.CPU < 0 || l.Pids < 0 || l.FileSizeBytes < 0 {
		return fmt.Errorf("limits: negative memory, cpu, pids or file_size")
	}
	return nil
}

// limitsWatched reports whether l has a limit for the watchdog to
// enforce.
func limitsWatched(l *wire.Limits) bool {
	return l != nil && (l.MemoryBytes > 0 || l.Pids > 0)
}

// LimitExecCommand is the hidden subcommand that sets the rlimits of the
// child and then executes it: `limit-exec [--fsize BYTES] [--nproc N] --
// PATH ARGV0 ARGS...`. Go cannot set a child's rlimits between fork and
// exec, and setting them on the supervisor would bind every attempt.
const LimitExecCommand = "limit-exec"

// LimitArgs is the argv of limit-exec running cmd's program, or nil when
// no rlimit is to be set and no cgroup joined. nproc is RLIMIT_NPROC (0:
// none); cgroups are the directories to join.
func LimitArgs(exe string, l *wire.Limits, nproc int, cgroups []string, cmd *exec.Cmd) []string {
	if l == nil || (l.FileSizeBytes <= 0 && nproc <= 0 && len(cgroups) == 0) {
		return nil
	}
	a := []string{exe, LimitExecCommand}
	for _, d := range cgroups {
		a = append(a, "--cgroup", d)
	}
	if l.FileSizeBytes > 0 {
		a = append(a, "--fsize", strconv.FormatInt(l.FileSizeBytes, 10))
	}
	if nproc > 0 {
		a = append(a, "--nproc", strconv.Itoa(nproc))
	}
	a = append(a, "--", cmd.Path)
	return append(a, cmd.Args...)
}

// OomMessage is the error of an attempt the cgroup's OOM killer struck.
func OomMessage(l *wire.Limits) string {
	return "killed: the task's processes asked for memory over its limit of " + sizeString(l.MemoryBytes) + " (the cgroup's OOM killer struck)"
}

// PidsMessage is the error of an attempt whose fork the pids cgroup
// refused.
func PidsMessage(l *wire.Limits) string {
	return "killed: the task tried to start a process or thread over its pids limit of " + strconv.Itoa(l.Pids) + " (the cgroup refused the fork)"
}

// NprocMessage is the error of an attempt whose fork RLIMIT_NPROC, the
// pids limit's backstop without a cgroup, refused; base is the threads
// the node user ran when the attempt started.
func NprocMessage(l *wire.Limits, base int) string {
	return "failed: the task's fork of a process or thread was refused at its pids limit of " + strconv.Itoa(l.Pids) +
		" (RLIMIT_NPROC " + strconv.Itoa(l.Pids+base) + ": the limit plus the " + strconv.Itoa(base) +
		" threads the node user ran when the attempt started)"
}

// forkRefusals are the words of a refused fork or thread in a tool's
// output, lower-cased: dash's "Cannot fork", busybox's "can't fork", bash's
// "fork: retry: Resource temporarily unavailable", Go's "failed to create
// new OS thread", Node's "spawn EAGAIN", glibc's "pthread_create".
var forkRefusals = []string{"cannot fork", "can't fork", "fork: retry", "fork failed", "failed to create new os thread", "spawn eagain", "pthread_create"}

// ForkRefused reports whether one of the last lines of a tool's log says
// a fork or a thread was refused: a line with one of forkRefusals, or
// EAGAIN's "resource temporarily unavailable" on a line naming a fork, a
// thread, a spawn or a clone (not a read of a non-blocking socket).
func ForkRefused(tail []byte) bool {
	if len(tail) > taskfiles.ClassifyTail {
		tail = tail[len(tail)-taskfiles.ClassifyTail:]
	}
	for line := range strings.SplitSeq(strings.ToLower(string(tail)), "\n") {
		for _, w := range forkRefusals {
			if strings.Contains(line, w) {
				return true
			}
		}
		if strings.Contains(line, "resource temporarily unavailable") || strings.Contains(line, "eagain") {
			for _, w := range []string{"fork", "thread", "spawn", "clone"} {
				if strings.Contains(line, w) {
					return true
				}
			}
		}
	}
	return false
}

// sizeString writes a byte count for a message: 64 MiB, 1.5 GiB.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
