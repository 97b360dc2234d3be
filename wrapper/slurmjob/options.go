package slurmjob

import (
	"fmt"
	"sort"
	"strings"
)

// Owned are the sbatch options dispatch sets itself: a node's slurm.extra
// may not give them, since each would break how dispatch finds, runs or
// bounds the job. Each maps to what the user should write instead.
var Owned = map[string]string{
	"--job-name":      "dispatch names each job after its home; it finds the job by that name",
	"--comment":       "dispatch writes project/task/attempt in the comment",
	"--output":        "the supervisor writes the attempt's logs in the task directory",
	"--error":         "the supervisor writes the attempt's logs in the task directory",
	"--input":         "the batch script feeds the supervisor its secrets",
	"--wrap":          "dispatch writes the batch script",
	"--chdir":         "the job runs in the task directory",
	"--parsable":      "dispatch reads sbatch's answer itself",
	"--mem":           "write limits: {memory: ...} on the node, project or task",
	"--mem-per-cpu":   "write limits: {memory: ...} on the node, project or task",
	"--cpus-per-task": "write limits: {cpu: ...} on the node, project or task",
	"--time":          "write slurm: {time: ...} or the task's timeout:",
	"--partition":     "write slurm: {partition: ...}",
	"--account":       "write slurm: {account: ...}",
	"--qos":           "write slurm: {qos: ...}",
	"--array":         "each attempt is one job; dispatch runs the tasks of a matrix itself",
	"--dependency":    "dispatch orders tasks by depends_on:",
	"--requeue":       "dispatch runs an attempt again itself (a job requeued by Slurm would run twice)",
	"--no-requeue":    "dispatch sets it",
	"--hold":          "a held job never starts",
	"--wait":          "sbatch must return at once",
	"--test-only":     "the job would never be submitted",
	"--export":        "dispatch hands the task its environment",
	"--export-file":   "dispatch hands the task its environment",
	"--get-user-env":  "dispatch hands the task its environment",
}

// short are sbatch's one-letter spellings of the options in Owned.
var short = map[string]string{
	"-J": "--job-name", "-o": "--output", "-e": "--error", "-i": "--input",
	"-D": "--chdir", "-c": "--cpus-per-task", "-t": "--time", "-p": "--partition",
	"-A": "--account", "-q": "--qos", "-a": "--array", "-d": "--dependency",
	"-H": "--hold", "-W": "--wait",
}

// CheckExtra checks one item of slurm.extra: a whole long option, with
// its value after "=" (--gres=gpu:1, --constraint=a100, --exclusive),
// that dispatch does not set itself. The error says what is wrong and
// what to write.
func CheckExtra(arg string) error {
	if strings.ContainsFunc(arg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%q holds a control character; write one sbatch option per item", arg)
	}
	if s, ok := short[arg[:min(2, len(arg))]]; ok && !strings.HasPrefix(arg, "--") {
		return fmt.Errorf("%q is sbatch's %s, which dispatch sets itself: %s", arg, s, Owned[s])
	}
	if !strings.HasPrefix(arg, "--") || len(arg) == 2 {
		return fmt.Errorf("%q is not a long sbatch option; write each option whole, with its value after =, e.g. --gres=gpu:1", arg)
	}
	name, _, _ := strings.Cut(arg, "=")
	if why, ok := Owned[name]; ok {
		return fmt.Errorf("%s is set by dispatch: %s", name, why)
	}
	// sbatch takes an unambiguous prefix of a long option for the option.
	for _, o := range sortedOwned() {
		if strings.HasPrefix(o, name) {
			return fmt.Errorf("%s is sbatch's abbreviation of %s, which dispatch sets itself: %s", name, o, Owned[o])
		}
	}
	return nil
}

// sortedOwned lists Owned's options in order, so messages do not vary.
func sortedOwned() []string {
	out := make([]string, 0, len(Owned))
	for o := range Owned {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}
