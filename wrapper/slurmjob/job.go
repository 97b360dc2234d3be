package slurmjob

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// Files the job writes or reads in its task directory.
const (
	// FileSecrets holds the supervisor's document (the attempt's
	// directory and secret environment), 0600; the batch script opens it
	// as the supervisor's stdin and deletes it before the supervisor runs.
	FileSecrets = ".slurm-attempt.json"
	// FileOutput is the job's own output: Slurm's messages (a time limit,
	// a cancel) and anything the batch script prints before the wrapper.
	FileOutput = "slurm.out"
)

// DropSecrets removes dir's FileSecrets, if any: a previous attempt's
// that its job never read (refused, cancelled while queued, lost).
func DropSecrets(dir string) error {
	if err := os.Remove(filepath.Join(dir, FileSecrets)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// TimeMargin is added to a task's timeout for the job's --time, so that
// the wrapper's own timeout ends the attempt (with its files) first.
const TimeMargin = 5 * time.Minute

// Cluster is what a node's slurm: block gives every job of the node, with
// the QoS already chosen for the job's priority.
type Cluster struct {
	Partition, Account, QOS string
	Time                    time.Duration // 0: the partition's limit
	Extra                   []string      // checked with CheckExtra
}

// Job is one attempt as a batch job.
type Job struct {
	// Home identifies the dispatch home the job belongs to (JobName).
	Home          string
	Project, Task string
	Attempt       int
	// Dir is the task directory, absolute, on the filesystem the login
	// host and the compute nodes share.
	Dir string
	// Wrapper is the wrapper binary's absolute path, on that filesystem.
	Wrapper string
	Limits  wire.Limits
	// Timeout is the attempt's timeout (0: none).
	Timeout time.Duration
}

// namePart is what may appear in a job's name and comment: the words of
// dispatch's own names, nothing a squeue line's separators could hold.
// Compiled on first use: only a Slurm node's wrapper needs it.
var namePart = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`) })

// JobName is the name of every job of a home: the one squeue query of a
// tick asks for it, and it tells this home's jobs from any other's.
func JobName(home string) string { return "dispatch-" + home }

// Comment names the job's project, task and attempt: "project/task/N".
func Comment(project, task string, attempt int) string {
	return project + "/" + task + "/" + strconv.Itoa(attempt)
}

// check says what is wrong with j for a job, if anything.
func (j Job) check() error {
	switch {
	case !namePart().MatchString(j.Home):
		return fmt.Errorf("home id %q is not a plain name", j.Home)
	case !namePart().MatchString(j.Project) || !namePart().MatchString(j.Task):
		return fmt.Errorf("project %q or task %q is not a plain name", j.Project, j.Task)
	case j.Attempt < 1:
		return fmt.Errorf("attempt %d is not positive", j.Attempt)
	case !strings.HasPrefix(j.Dir, "/") || !strings.HasPrefix(j.Wrapper, "/"):
		return fmt.Errorf("task directory %q and wrapper %q must be absolute paths", j.Dir, j.Wrapper)
	}
	return nil
}

// SbatchArgs is the sbatch command line that submits j (the batch script,
// Script, goes on sbatch's stdin): --parsable so the answer is the job id
// alone, no requeue by Slurm (dispatch runs an attempt again itself), and
// the limits as --mem, --cpus-per-task and --time.
func SbatchArgs(c Cluster, j Job) ([]string, error) {
	if err := j.check(); err != nil {
		return nil, err
	}
	args := []string{"sbatch", "--parsable", "--no-requeue",
		"--job-name=" + JobName(j.Home),
		"--comment=" + Comment(j.Project, j.Task, j.Attempt),
		"--chdir=" + j.Dir,
		"--output=" + j.Dir + "/" + FileOutput,
	}
	for _, o := range []struct{ opt, val string }{
		{"--partition", c.Partition}, {"--account", c.Account}, {"--qos", c.QOS},
	} {
		if o.val != "" {
			args = append(args, o.opt+"="+o.val)
		}
	}
	if m := j.Limits.MemoryBytes; m > 0 {
		args = append(args, fmt.Sprintf("--mem=%dM", (m+(1<<20)-1)>>20))
	}
	if cpu := j.Limits.CPU; cpu > 0 {
		args = append(args, fmt.Sprintf("--cpus-per-task=%d", int(math.Ceil(cpu))))
	}
	if d := TimeLimit(c.Time, j.Timeout); d > 0 {
		args = append(args, "--time="+FormatTime(d))
	}
	for _, e := range c.Extra {
		if err := CheckExtra(e); err != nil {
			return nil, fmt.Errorf("slurm.extra: %w", err)
		}
		args = append(args, e)
	}
	return args, nil
}

// TimeLimit is a job's --time: the node's slurm.time, shortened to the
// task's timeout plus TimeMargin; 0 when neither is set.
func TimeLimit(cluster, timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return cluster
	}
	if t := timeout + TimeMargin; cluster <= 0 || t < cluster {
		return t
	}
	return cluster
}

// FormatTime writes d as Slurm's days-hours:minutes:seconds, rounded up
// to a whole minute (Slurm's unit of job time).
func FormatTime(d time.Duration) string {
	m := int64((d + time.Minute - 1) / time.Minute)
	return fmt.Sprintf("%d-%02d:%02d:00", m/(24*60), m/60%24, m%60)
}

// Script is the batch script of j: it runs the wrapper's supervisor in
// the task directory, as `wrapper run` does on an SSH node, with the
// secrets file as its stdin, deleted before the supervisor starts; the
// supervisor takes the task's lock itself (no `run` took it for the job).
// Nothing secret is in the script.
func Script(j Job) (string, error) {
	if err := j.check(); err != nil {
		return "", err
	}
	dir := quote(j.Dir)
	return "#!/bin/sh\n" +
		"# dispatch: " + Comment(j.Project, j.Task, j.Attempt) + "\n" +
		"umask 077\n" +
		"cd " + dir + " || exit 111\n" +
		"exec 0<" + quote(j.Dir+"/"+FileSecrets) + " || exit 111\n" +
		"rm -f " + quote(j.Dir+"/"+FileSecrets) + "\n" +
		"exec " + quote(j.Wrapper) + " supervise 2>>" + quote(j.Dir+"/wrapper.log") + "\n", nil
}

// quote is s as one word of a POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ErrNoJobID is sbatch's answer without a job id in it.
var ErrNoJobID = errors.New("sbatch printed no job id")

// ParseSubmit reads sbatch --parsable's answer: "id" or "id;cluster".
func ParseSubmit(out []byte) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	id, _, _ := strings.Cut(strings.TrimSpace(line), ";")
	if id == "" || strings.Trim(id, "0123456789") != "" {
		return "", fmt.Errorf("%w: %q", ErrNoJobID, clip(line))
	}
	return id, nil
}

// clip shortens text from the cluster for a message.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
