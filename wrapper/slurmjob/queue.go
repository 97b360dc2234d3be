package slurmjob

import (
	"fmt"
	"strconv"
	"strings"
)

// QueueFormat is the squeue output format of the one query: job id,
// state, comment and reason, the reason last since it may hold anything
// but a newline.
const QueueFormat = "%i|%T|%k|%r"

// QueueArgs is the squeue command line that lists every job of a home, in
// every state squeue still knows (a finished job stays MinJobAge), one
// line each in QueueFormat: one call per tick, whatever the number of
// tasks.
func QueueArgs(home string) []string {
	return []string{"squeue", "--noheader", "--me", "--states=all", "--name=" + JobName(home), "--format=" + QueueFormat}
}

// QueueJob is one line of the query's answer.
type QueueJob struct {
	ID    string
	State string // Slurm's long state name: PENDING, RUNNING, CANCELLED, …
	// Reason is why a job waits (Resources, Priority, ReqNodeNotAvail, …)
	// or why it ended; "" for Slurm's "None".
	Reason string
	// Project, Task and Attempt come from the comment; Attempt is 0 when
	// the comment is not one dispatch wrote.
	Project, Task string
	Attempt       int
}

// maxQueueLines bounds the answer read: more jobs than any home submits.
const maxQueueLines = 1 << 20

// ParseQueue reads the query's answer. A line that is not QueueFormat
// fails the whole answer: the caller then knows nothing this tick, which
// is safer than a job read wrong.
func ParseQueue(out []byte) ([]QueueJob, error) {
	var jobs []QueueJob
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if i >= maxQueueLines {
			return nil, fmt.Errorf("squeue: more than %d lines", maxQueueLines)
		}
		f := strings.SplitN(line, "|", 4)
		if len(f) != 4 || f[0] == "" || strings.Trim(f[0], "0123456789") != "" || f[1] == "" {
			return nil, fmt.Errorf("squeue: line %d is not id|state|comment|reason: %q", i+1, clip(line))
		}
		j := QueueJob{ID: f[0], State: strings.TrimSpace(f[1]), Reason: strings.TrimSpace(f[3])}
		if j.Reason == "None" {
			j.Reason = ""
		}
		j.Project, j.Task, j.Attempt = parseComment(f[2])
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// parseComment reads Comment's "project/task/N"; attempt 0 when it is not.
func parseComment(s string) (project, task string, attempt int) {
	f := strings.Split(strings.TrimSpace(s), "/")
	if len(f) != 3 || !namePart().MatchString(f[0]) || !namePart().MatchString(f[1]) {
		return "", "", 0
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 1 || strconv.Itoa(n) != f[2] {
		return "", "", 0
	}
	return f[0], f[1], n
}

// Find returns the job of an attempt in a query's answer: after sbatch
// failed (a timeout may still have submitted it), the attempt's job is
// looked up here before it is submitted again. Of several, the newest
// (highest id) is the one.
func Find(jobs []QueueJob, project, task string, attempt int) (QueueJob, bool) {
	var best QueueJob
	found := false
	for _, j := range jobs {
		if j.Project != project || j.Task != task || j.Attempt != attempt {
			continue
		}
		if !found || idLess(best.ID, j.ID) {
			best, found = j, true
		}
	}
	return best, found
}

// idLess orders job ids numerically.
func idLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}
