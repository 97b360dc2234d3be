package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// Slurm is the executor of a Slurm node (issue 36, docs/EXECUTORS.md):
// the wrapper on the login host writes each attempt's files (`wrapper
// prepare`), each attempt is one `sbatch` job that runs the supervisor in
// its task directory on a compute node, one squeue per Status lists every
// job of this home beside the wrapper's status of the task directories
// (read by the node's wrapper executor, Inner), and a kill is a scancel.
type Slurm struct {
	tr      nodes.Transport
	name    string // the node's
	inner   Executor
	timeout func() time.Duration
	slurm   *nodes.Slurm
	home    string // slurmjob.HomeTag of this home
	// grace is how long a job ended or gone without the wrapper's final
	// status is given before its attempt ends (slurmjob.Decide).
	grace time.Duration
	now   func() time.Time

	mu sync.Mutex // guards jobs, since and asked
	// jobs is the job of each task directory's latest attempt, as
	// submitted or found in the queue.
	jobs map[string]slurmJob
	// since is when the job of a task directory was first seen ended or
	// gone without a final status.
	since map[string]time.Time
	// asked are the task directories whose attempt this executor is
	// killing: a kill asked after the database was read for the Status
	// call (Query.Running says the others, whichever controller asked).
	asked map[string]bool
}

var _ Executor = (*Slurm)(nil)

// slurmJob is the job of one attempt.
type slurmJob struct {
	id      string
	attempt int
}

// slurmGrace is slurmExec.grace: a few polls of a job whose wrapper's last
// write lags squeue.
const slurmGrace = 10 * time.Second

// NewSlurm returns the executor of Slurm node cfg, reached over tr (its
// login host) for the home at home; inner is the node's wrapper executor,
// which reads the task directories' status files and ends a killed
// attempt's record; timeout bounds one call.
func NewSlurm(cfg nodes.Node, tr nodes.Transport, inner Executor, timeout func() time.Duration, home string) *Slurm {
	return &Slurm{tr: tr, name: cfg.Name, inner: inner, timeout: timeout, slurm: cfg.Slurm, home: slurmjob.HomeTag(nodes.HomeID(home)),
		grace: slurmGrace, now: time.Now, jobs: map[string]slurmJob{}, since: map[string]time.Time{}, asked: map[string]bool{}}
}

// Slurm's share of the bounds the controller's calls use.
const (
	// killSlack is a kill's time beyond its grace.
	killSlack = 15 * time.Second
)

// Launch writes the attempts' files in one `wrapper prepare` call, then
// submits one job each. An sbatch that fails without the cluster's refusal
// (a timeout may still have submitted) leaves its attempt in doubt: the
// next Status finds the job by name and comment, or the claim is given up
// and launched again.
func (s *Slurm) Launch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem) []Launched {
	outs := make([]Launched, len(items))
	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	err := nodes.CheckWorkDir(cctx, s.tr, *inst)
	cancel()
	if err == nil {
		err = s.prepare(ctx, inst, items, outs)
	}
	if err != nil {
		for i := range outs {
			outs[i] = Launched{Err: err}
		}
		return outs
	}
	for i, item := range items {
		if outs[i].Err == nil {
			outs[i] = s.submit(ctx, inst, item)
		}
	}
	return outs
}

// prepare runs `wrapper prepare` and records a refused item's error in outs.
func (s *Slurm) prepare(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem, outs []Launched) error {
	doc, err := json.Marshal(wire.LaunchBatch{Launches: items})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout()+time.Duration(len(doc)/minLaunchRate)*time.Second)
	defer cancel()
	res, err := s.tr.Exec(rctx, []string{inst.Path, "prepare"}, doc)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	var reply wire.LaunchReply
	if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &reply) != nil || len(reply.Results) != len(items) {
		return fmt.Errorf("wrapper prepare: %s", policy.ReplyError(res, nil))
	}
	for i, r := range reply.Results {
		if r.Error != "" {
			outs[i].Err = fmt.Errorf("wrapper prepare: %s", r.Error)
		}
	}
	return nil
}

// submit submits one prepared attempt.
func (s *Slurm) submit(ctx context.Context, inst *nodes.Installed, item wire.LaunchItem) Launched {
	l := item.Launch
	j := slurmjob.Job{Home: s.home, Project: l.Project, Task: l.Task, Attempt: l.Attempt, Dir: item.Dir, Wrapper: inst.Path,
		Timeout: time.Duration(l.TimeoutSeconds * float64(time.Second))}
	if l.Limits != nil {
		j.Limits = *l.Limits
	}
	c := slurmjob.Cluster{Partition: s.slurm.Partition, Account: s.slurm.Account, QOS: s.slurm.QOSFor(l.Priority),
		Time: s.slurm.Time, Extra: s.slurm.Extra}
	args, err := slurmjob.SbatchArgs(c, j)
	if err != nil {
		return Launched{Err: err}
	}
	script, err := slurmjob.Script(j)
	if err != nil {
		return Launched{Err: err}
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	res, err := s.tr.Exec(rctx, args, []byte(script))
	switch {
	case err != nil:
		return Launched{Uncertain: fmt.Errorf("sbatch: %w", err)}
	case res.ExitCode != 0 && bytes.Contains(res.Stderr, []byte("Batch job submission failed")):
		// slurmctld answered, and refused the job: no job reads its secrets.
		s.dropSecrets(ctx, item.Dir)
		return Launched{Err: fmt.Errorf("sbatch: %s", bytes.TrimSpace(res.Stderr))}
	case res.ExitCode != 0:
		return Launched{Uncertain: fmt.Errorf("sbatch: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))}
	}
	id, err := slurmjob.ParseSubmit(res.Stdout)
	if err != nil {
		return Launched{Uncertain: err}
	}
	s.mu.Lock()
	s.jobs[item.Dir] = slurmJob{id: id, attempt: l.Attempt}
	delete(s.since, item.Dir)
	s.mu.Unlock()
	return Launched{Run: &wire.RunReply{Task: l.Task, Attempt: l.Attempt, Status: wire.StatusRunning}, SlurmJob: id}
}

// Status asks squeue for every job of this home, then the wrapper for the
// task directories, and lets each attempt's job say whether the attempt
// lives (slurmjob.Decide): a waiting or running job keeps it alive, a job
// that ended or left the queue without a final status ends it. A failed
// squeue concludes nothing (unknown): the node answered, so it is not an
// error, which would put the node offline and lose its tasks while their
// jobs run on.
func (s *Slurm) Status(ctx context.Context, inst *nodes.Installed, q Query) (*wire.NodeStatus, error) {
	jobs, qerr := s.queue(ctx)
	// Every entry whole (no tags): the executor changes entries.
	q.Tags = nil
	st, err := s.inner.Status(ctx, inst, q)
	if err != nil {
		return nil, err
	}
	ended := endedByDispatch(q.Running)
	s.mu.Lock()
	now := s.now()
	var unread []string
	for i := range st.Tasks {
		if qerr != nil {
			s.unknown(&st.Tasks[i], qerr)
		} else if s.judge(&st.Tasks[i], jobs, ended(st.Tasks[i]), now) {
			unread = append(unread, st.Tasks[i].Dir)
		}
	}
	s.mu.Unlock()
	for _, dir := range unread {
		s.dropSecrets(ctx, dir)
	}
	return st, nil
}

// endedByDispatch says, from the tasks the database has claimed or
// running on the node (Query.Running), whether dispatch ended a task's
// attempt: the database records a cancel, a stop --kill or a preemption
// before the kill goes out, so this survives a controller's restart,
// which the executor's memory of its kills does not. nil knows nothing.
func endedByDispatch(running []string) func(wire.TaskStatus) bool {
	if running == nil {
		return func(wire.TaskStatus) bool { return false }
	}
	live := make(map[string]bool, len(running))
	for _, r := range running {
		live[r] = true
	}
	return func(ts wire.TaskStatus) bool { return !live[ts.Project+"/"+ts.Task] }
}

// dropSecrets removes the secrets file of an attempt in dir whose job
// will never read it (the job script deletes it when it starts): left, the
// attempt's environment would outlive it on disk.
func (s *Slurm) dropSecrets(ctx context.Context, dir string) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	// A failure leaves the file to the next attempt's prepare.
	_ = s.tr.Remove(rctx, filepath.Join(dir, slurmjob.FileSecrets))
}

// unknown marks an attempt whose job squeue could not say (s.mu is held):
// one with a job of this executor's, or without a final status (its job
// may be queued), stays alive and waits, its status held back so that
// nothing is concluded (not even a final status: it counts once squeue
// answers, as the job's end is known). Others are the wrapper's word.
func (s *Slurm) unknown(ts *wire.TaskStatus, qerr error) {
	_, ours := s.jobs[ts.Dir]
	if !ours && ts.Status != nil && ts.Status.Final() {
		return
	}
	ts.Alive, ts.Waiting, ts.Again = true, qerr.Error(), ""
	ts.Status, ts.StatusError, ts.ToolRunning = nil, "", false
}

// queue runs the one squeue call.
func (s *Slurm) queue(ctx context.Context) ([]slurmjob.QueueJob, error) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	res, err := s.tr.Exec(rctx, slurmjob.QueueArgs(s.home), nil)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		return nil, fmt.Errorf("squeue failed: %w", err)
	}
	return slurmjob.ParseQueue(res.Stdout)
}

// judge sets ts.Alive from its attempt's job; s.mu is held. The status
// file counts only when it is the job's attempt's: until the job's
// supervisor starts, status.json is still the attempt before's. It
// reports whether the attempt ended before its job started (its secrets
// file unread). ended: dispatch ended the attempt (endedByDispatch).
func (s *Slurm) judge(ts *wire.TaskStatus, jobs []slurmjob.QueueJob, ended bool, now time.Time) (unread bool) {
	var job *slurmjob.QueueJob
	for k := range jobs {
		j := &jobs[k]
		if j.Project == ts.Project && j.Task == ts.Task && (job == nil || j.Attempt > job.Attempt) {
			job = j
		}
	}
	known, ours := s.jobs[ts.Dir]
	switch {
	case job != nil && (!ours || job.Attempt >= known.attempt):
		if known.id != job.ID {
			delete(s.since, ts.Dir)
		}
		known = slurmJob{id: job.ID, attempt: job.Attempt}
		s.jobs[ts.Dir] = known
	case ours:
		job = nil // its job left the queue
	default:
		return false // no job of this home: the wrapper's word stands
	}
	cur := ts.Status != nil && ts.Status.Attempt == known.attempt
	v := slurmjob.Decide(slurmjob.Observation{QueryOK: true, Job: job, Started: cur,
		Final: cur && ts.Status.Final(), Since: s.since[ts.Dir]}, now, s.grace)
	if v.Since.IsZero() && v.Action != slurmjob.Settle { // Settle: see unasked
		delete(s.since, ts.Dir)
	} else {
		s.since[ts.Dir] = v.Since
	}
	switch v.Action {
	case slurmjob.Watch:
		ts.Alive, ts.Waiting, ts.SlurmJob = true, v.Reason, known.id
	case slurmjob.Settle:
		if !ended && !s.unasked(ts, job, known.id, now) {
			return // held until the job's end shows
		}
		delete(s.jobs, ts.Dir)
		delete(s.asked, ts.Dir)
		delete(s.since, ts.Dir)
	case slurmjob.Again, slurmjob.Crash, slurmjob.Lost:
		ts.Alive = false
		if !cur {
			ts.Status, ts.StatusError = nil, v.Reason
		}
		if v.Action != slurmjob.Crash {
			ts.Again = v.Reason
		}
		delete(s.jobs, ts.Dir)
		return !cur
	}
	return false
}

// unasked rewrites ts's final status when it failed of a kill dispatch
// did not ask for (slurmjob.Unasked; one it asked for is endedByDispatch
// or in s.asked): an ordinary crash saying how Slurm
// ended the job. false holds the status back (ts seen alive, no status)
// until squeue shows the job ended; s.mu is held.
func (s *Slurm) unasked(ts *wire.TaskStatus, job *slurmjob.QueueJob, id string, now time.Time) bool {
	if ts.Status.Status == wire.StatusCompleted || s.asked[ts.Dir] {
		return true
	}
	since := s.since[ts.Dir]
	if since.IsZero() {
		since = now
	}
	hold, reason := slurmjob.Unasked(job, id, ts.Status.ErrorClass == wire.ClassKilled, now.Sub(since), s.grace)
	if hold {
		s.since[ts.Dir] = since
		ts.Status, ts.Alive = nil, true
		return false
	}
	if reason != "" {
		st := *ts.Status
		st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassCrash, reason
		ts.Status = &st
	}
	return true
}

// Kill cancels each attempt's job and waits until squeue shows it ended,
// then asks the wrapper for the attempt's final status. Slurm signals the
// supervisor (SIGTERM, SIGKILL after the cluster's KillWait).
func (s *Slurm) Kill(ctx context.Context, inst *nodes.Installed, kills []Kill) []Killed {
	outs := make([]Killed, len(kills))
	for i, k := range kills {
		kctx, cancel := context.WithTimeout(ctx, s.timeout()+killSlack+k.Grace)
		outs[i] = s.kill(kctx, inst, k)
		cancel()
	}
	return outs
}

func (s *Slurm) kill(ctx context.Context, inst *nodes.Installed, k Kill) Killed {
	project, task := filepath.Base(filepath.Dir(filepath.Dir(k.Dir))), filepath.Base(k.Dir)
	s.mu.Lock()
	s.asked[k.Dir] = true
	s.mu.Unlock()
	for {
		jobs, err := s.queue(ctx)
		if err != nil {
			return Killed{Err: err}
		}
		var live []string
		for _, j := range jobs {
			if j.Project == project && j.Task == task && slurmjob.Decide(slurmjob.Observation{QueryOK: true, Job: &j}, time.Time{}, 0).Action == slurmjob.Watch {
				live = append(live, j.ID)
			}
		}
		if len(live) == 0 {
			// No job of the attempt runs or can start: secrets a job
			// never read go (one that started deleted its own).
			s.dropSecrets(ctx, k.Dir)
			break
		}
		if res, err := s.tr.Exec(ctx, append([]string{"scancel"}, live...), nil); err != nil || res.ExitCode != 0 {
			return Killed{Err: fmt.Errorf("scancel %v: %v %s", live, err, bytes.TrimSpace(res.Stderr))}
		}
		select {
		case <-ctx.Done():
			return Killed{Err: fmt.Errorf("slurm jobs %v still run: %w", live, ctx.Err())}
		case <-time.After(200 * time.Millisecond):
		}
	}
	return s.inner.Kill(ctx, inst, []Kill{k})[0]
}

// Close closes the inner executor.
func (s *Slurm) Close() { s.inner.Close() }
