package slurmjob

import (
	"fmt"
	"time"
)

// Action is what an attempt's job state means for the attempt.
type Action string

const (
	// Watch: nothing to do; Reason, when set, is why the job waits.
	Watch Action = "watch"
	// Settle: the wrapper wrote the attempt's final status, which decides
	// (the wrapper's files are the source of truth, whatever Slurm says).
	Settle Action = "settle"
	// Unknown: squeue failed; nothing is concluded this tick.
	Unknown Action = "unknown"
	// Again: Slurm ended the job before the wrapper started (cancelled
	// from outside, a node failure, a preemption): run the attempt again
	// without using a retry.
	Again Action = "again"
	// Crash: the job ended without the wrapper's final status after the
	// wrapper started, or failed before it: an ordinary crash.
	Crash Action = "crash"
	// Lost: the job left the queue without a final status and the grace
	// has passed.
	Lost Action = "lost"
)

// Observation is what one tick's call saw of one attempt's job.
type Observation struct {
	// QueryOK is whether squeue answered.
	QueryOK bool
	// Job is the attempt's job in the answer; nil when it is not listed.
	Job *QueueJob
	// Started: the wrapper's status.json shows the attempt under way.
	Started bool
	// Final: the wrapper wrote the attempt's final status.
	Final bool
	// Since is when the job was first seen ended or gone without a final
	// status (Verdict.Since of the tick before); zero if it was not.
	Since time.Time
}

// Verdict is Decide's answer.
type Verdict struct {
	Action Action
	// Reason says why, for status and the attempt's error: Slurm's
	// pending reason under Watch, the job's end otherwise.
	Reason string
	// Since is the Observation.Since of the next tick.
	Since time.Time
}

// Slurm's job states, by what they mean for an attempt (squeue %T).
var (
	waiting = set("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")
	active  = set("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESIZING")
	// outside are ends the attempt did not cause: before the wrapper
	// started, the attempt runs again without using a retry.
	outside = set("CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED")
)

func set(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

// Decide says what the job of one attempt means, from one tick's
// observation: a final status always settles; a failed squeue concludes
// nothing; a pending job shows Slurm's reason (a running one none, so
// that a wrapper that never starts is judged hung); a job that ended or left
// the queue without a final status is given grace (the wrapper's last
// write may lag squeue) and then is an outside end before the wrapper
// started (run again, no retry), a crash after it, or lost when it left
// the queue altogether.
func Decide(o Observation, now time.Time, grace time.Duration) Verdict {
	switch {
	case o.Final:
		return Verdict{Action: Settle}
	case !o.QueryOK:
		return Verdict{Action: Unknown, Reason: "squeue failed", Since: o.Since}
	case o.Job != nil && waiting[o.Job.State]:
		return Verdict{Action: Watch, Reason: pendingReason(o.Job)}
	case o.Job != nil && active[o.Job.State]:
		// No reason even before the wrapper started: only a queued job
		// waits; a running one whose wrapper never writes is hung after
		// heartbeat_timeout (the controller's awaitStatus).
		return Verdict{Action: Watch}
	}
	since := o.Since
	if since.IsZero() {
		since = now
	}
	if now.Sub(since) < grace {
		return Verdict{Action: Watch, Since: since}
	}
	if o.Job == nil {
		return Verdict{Action: Lost, Reason: "the job left the Slurm queue without the wrapper's final status", Since: since}
	}
	end := ended(o.Job)
	switch {
	case !o.Started && outside[o.Job.State]:
		return Verdict{Action: Again, Reason: end + " before the wrapper started", Since: since}
	case !o.Started:
		return Verdict{Action: Crash, Reason: end + " before the wrapper started (see " + FileOutput + " in the task directory)", Since: since}
	}
	return Verdict{Action: Crash, Reason: end + " without the wrapper's final status", Since: since}
}

// pendingReason is what status shows of a waiting job.
func pendingReason(j *QueueJob) string {
	if j.Reason == "" {
		return "Slurm job " + j.ID + " " + j.State
	}
	return fmt.Sprintf("Slurm job %s %s: %s", j.ID, j.State, j.Reason)
}

// ended says how a job ended, in words.
func ended(j *QueueJob) string {
	s := "Slurm job " + j.ID + " ended " + j.State
	switch j.State {
	case "TIMEOUT":
		s += " (its --time limit)"
	case "OUT_OF_MEMORY":
		s += " (its --mem limit)"
	}
	if j.Reason != "" {
		s += " (" + j.Reason + ")"
	}
	return s
}

// Submit is what to do after sbatch failed for an attempt.
type Submit string

const (
	// SubmitAgain: the attempt has no job; submit it again.
	SubmitAgain Submit = "submit"
	// Adopt: the failed sbatch did submit; the attempt's job is Verdict's.
	Adopt Submit = "adopt"
	// Hold: squeue failed too; submit nothing until a query answers.
	Hold Submit = "hold"
)

// AfterSubmitError decides, from a query made after sbatch failed, whether
// the attempt is submitted again: sbatch is not idempotent (a timeout may
// still submit), so the attempt's job is looked up by its home's name and
// its comment first.
func AfterSubmitError(queryOK bool, jobs []QueueJob, project, task string, attempt int) (Submit, QueueJob) {
	if !queryOK {
		return Hold, QueueJob{}
	}
	if j, ok := Find(jobs, project, task, attempt); ok {
		return Adopt, j
	}
	return SubmitAgain, QueueJob{}
}

// Unasked says what the final, unsuccessful status of an attempt means
// when dispatch did not ask for its kill: a job Slurm ended (its --time
// limit, an administrator's scancel, a preemption) signalled the
// supervisor and the tool, and whichever saw it first wrote the status
// (killed, a crash by SIGTERM, exit 143). While squeue still shows the job
// active (completing) and waited is within grace, hold: the status waits
// for the job's end. Then a job ended by Slurm, or a status saying killed
// (killed is true), is a crash whose reason is returned; "" lets the
// wrapper's status stand. id is the job's id when job is nil.
func Unasked(job *QueueJob, id string, killed bool, waited, grace time.Duration) (hold bool, reason string) {
	switch {
	case job != nil && active[job.State] && waited < grace:
		return true, ""
	case job != nil && (outside[job.State] || job.State == "TIMEOUT"):
		return false, ended(job) + ": the supervisor was signalled by Slurm"
	case killed:
		return false, "Slurm job " + id + " was ended by Slurm, not by dispatch (its --time limit, an administrator's scancel or a preemption)"
	}
	return false, ""
}
