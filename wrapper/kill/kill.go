package kill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// killRequest is what `kill` leaves for a supervisor before it sends
// SIGUSR1 (see proc.KillRequestPath): which attempt to stop, with what grace
// (negative: launch.json's), since a signal carries no value and one
// supervisor runs several attempts.
type Request struct {
	Attempt      int     `json:"attempt"`
	GraceSeconds float64 `json:"grace_seconds"`
}

// killMargin is how long `kill` waits beyond the grace before it stops
// trusting the supervisor and kills the tool group itself.
const killMargin = 5 * time.Second

// Task stops the attempt in dir (only node's, when node is set) and
// returns its final status, with the session of the private record: a
// live supervisor is asked to stop it with grace (killLive), an orphan's
// tool group is killed (killOrphan).
func Task(ctx context.Context, dir, node string, grace time.Duration, graceSet bool) (*wire.Status, error) {
	// A `status` probe or a starting supervisor can hold the lock for a
	// moment, and a starting supervisor has not recorded itself yet, so
	// deciding between the two paths may take a few rounds.
	deadline := time.Now().Add(startWait)
	var refused error
	for {
		// Checked each round: a supervisor that starts meanwhile may be
		// another node's.
		if other := proc.RecordNode(dir); node != "" && other != "" && other != node {
			return nil, &errkind.Error{Kind: wire.KindOtherNode, Err: fmt.Errorf("kill %s: its attempt is node %s's, not %s's (a work_dir both nodes reach); nothing signalled", dir, other, node)}
		}
		alive, err := taskfiles.SupervisorAlive(dir)
		if err != nil {
			return nil, errkind.IO(err)
		}
		var st *wire.Status
		if alive {
			st, err = killLive(ctx, dir, grace, graceSet)
		} else {
			st, err = killOrphan(dir)
		}
		var r *refusal
		if errors.As(err, &r) {
			refused = err
			err = errRetry
		}
		if errors.Is(err, errRetry) {
			if time.Now().After(deadline) {
				if refused != nil {
					if st, ok, err := killUnderForeignLock(dir); ok {
						if err != nil {
							return nil, err
						}
						return st, nil
					}
					taskfiles.LogWrapper(dir, "kill: signalling nothing: %v", refused)
					return nil, &errkind.Error{Kind: wire.KindIO, Err: fmt.Errorf("kill %s: refusing to signal: %w", dir, refused)}
				}
				return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("kill %s: the lock keeps changing hands", dir)}
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
		return recordSession(dir, st), nil
	}
}

// recordSession gives the final status kill replies with the session of
// the supervisor's private record, as status does: status.json is the
// task's to rewrite, and a session id goes back into a tool's command
// line (a preempted attempt's next one resumes it).
func recordSession(dir string, st *wire.Status) *wire.Status {
	if st == nil {
		return nil
	}
	out := *st
	out.SessionID = ""
	if rec, err := proc.ReadRecord(dir); err == nil && rec.Attempt == st.Attempt {
		out.SessionID = rec.SessionID
	}
	return &out
}

// startWait is how long kill waits for a supervisor holding the lock to
// record itself: a new one moves the earlier attempt aside first.
const startWait = 5 * time.Second

// refusal is a check that failed before a signal to a live supervisor;
// cmdKill tries again until startWait, then reports it.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// errRetry means the supervisor appeared or vanished while kill looked.
var errRetry = errors.New("retry")

// killLive asks the live supervisor to stop and waits for the final status.
// If the supervisor does not finish within grace plus a margin, kill sends
// SIGKILL to the tool group itself; the supervisor then records the kill.
// A supervisor that still does not finish (frozen: SIGSTOP, a hung file
// system) is killed too, and kill writes the final status itself. Every pid
// comes from the process record and is checked before it is signalled.
func killLive(ctx context.Context, dir string, grace time.Duration, graceSet bool) (*wire.Status, error) {
	rec, err := proc.ReadRecord(dir)
	if err != nil {
		return nil, &refusal{fmt.Errorf("a supervisor holds the lock but %w", err)}
	}
	if err := rec.CheckSupervisor(); err != nil {
		return nil, &refusal{err}
	}
	if l, err := launchfile.Read(dir); err == nil && l.Attempt > rec.Attempt {
		// `run` replied for a later attempt, whose supervisor has not
		// recorded itself yet: the recorded one (of a batch, still
		// running its other attempts) is not the lock's holder.
		return nil, &refusal{fmt.Errorf("the supervisor of attempt %d has not recorded itself yet (the record is attempt %d's)", l.Attempt, rec.Attempt)}
	}
	req := Request{Attempt: rec.Attempt, GraceSeconds: -1}
	if graceSet {
		req.GraceSeconds = grace.Seconds()
	}
	if err := WriteRequest(dir, req); err != nil {
		return nil, errkind.IO(err)
	}
	if err := rec.SignalSupervisor(syscall.SIGUSR1); err != nil {
		return nil, refuse(dir, err)
	}

	if st, err := waitFinal(ctx, dir, grace+killMargin); st != nil || err != nil {
		return st, err
	}
	if rec, err := proc.ReadRecord(dir); err == nil {
		if err := rec.KillToolGroup(syscall.SIGKILL); err != nil && !errors.Is(err, proc.ErrNoGroup) {
			taskfiles.LogWrapper(dir, "kill: not killing the recorded tool group: %v", err)
		}
	}
	if st, err := waitFinal(ctx, dir, killMargin); st != nil || err != nil {
		return st, err
	}
	// The supervisor is alive but does not act: kill it, then record the
	// end of the attempt in its place.
	if err := rec.SignalSupervisor(syscall.SIGKILL); err != nil {
		if alive, aerr := taskfiles.SupervisorAlive(dir); aerr == nil && !alive {
			return nil, errRetry
		}
		return nil, refuse(dir, err)
	}
	taskfiles.LogWrapper(dir, "kill: supervisor %d did not finish after SIGTERM and a SIGKILL of its tool group; killed it", rec.SupervisorPID)
	deadline := time.Now().Add(killMargin)
	for {
		alive, err := taskfiles.SupervisorAlive(dir)
		if err != nil {
			return nil, errkind.IO(err)
		}
		if !alive {
			return killOrphanAs(dir, "killed on request; the supervisor did not respond and was killed")
		}
		if time.Now().After(deadline) {
			return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("supervisor %d still holds the lock after SIGKILL; see %s", rec.SupervisorPID, taskfiles.FileWrapper)}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeKillRequest leaves req where the supervisor of dir looks for it.
func WriteRequest(dir string, req Request) error {
	path, err := proc.KillRequestPath(dir)
	if err != nil {
		return err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return taskfiles.WriteFileAtomic(path, data, 0o600)
}

// refuse reports a signal that kill would not send, in wrapper.log and in
// the reply: an error of this task only.
func refuse(dir string, err error) error {
	taskfiles.LogWrapper(dir, "kill: signalling nothing: %v", err)
	return &errkind.Error{Kind: wire.KindIO, Err: fmt.Errorf("kill %s: refusing to signal: %w", dir, err)}
}

// waitFinal polls until status.json is final and the supervisor has let go
// of the lock (so a `run` right after kill is not refused), or until
// timeout, when it returns nil, nil.
func waitFinal(ctx context.Context, dir string, timeout time.Duration) (*wire.Status, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := taskfiles.ReadStatus(dir)
		if err == nil && st.Final() {
			alive, err := taskfiles.SupervisorAlive(dir)
			if err != nil {
				return nil, errkind.IO(err)
			}
			if !alive {
				return st, nil
			}
		}
		if err == nil && !st.Final() {
			// A supervisor killed meanwhile leaves running for ever.
			if alive, _ := taskfiles.SupervisorAlive(dir); !alive {
				return nil, errRetry
			}
		}
		if time.Now().After(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("interrupted waiting for the final status: %w", ctx.Err())}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killOrphan handles a task whose supervisor is not running: a final status
// is reported as it is; a running one means the supervisor died, so kill
// kills the recorded tool group and writes the killed status itself, under
// the lock so that no `run` starts meanwhile.
func killOrphan(dir string) (*wire.Status, error) {
	return killOrphanAs(dir, "killed on request; supervisor was not running")
}

func killOrphanAs(dir, msg string) (*wire.Status, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no task directory %s", dir)}
	}
	lock, ok, err := taskfiles.LockTask(dir, 0)
	if err != nil {
		return nil, errkind.IO(err)
	}
	if !ok {
		return nil, errRetry
	}
	defer lock.Close()
	return endOrphan(dir, msg)
}

// killUnderForeignLock handles a lock held by a process that is not the
// recorded supervisor, once that supervisor is provably gone (no process
// with its pid, or one that started at another time): the task itself, or
// something it left behind, holds D/lock. Nothing of the attempt's is
// alive to answer, so kill ends it as for an orphan, without the lock. ok
// is false when the record does not show the supervisor gone.
func killUnderForeignLock(dir string) (st *wire.Status, ok bool, err error) {
	rec, err := proc.ReadRecord(dir)
	if err != nil || !rec.SupervisorGone() {
		return nil, false, nil
	}
	taskfiles.LogWrapper(dir, "kill: the lock is held by a process that is not the recorded supervisor %d, which is gone", rec.SupervisorPID)
	st, err = endOrphan(dir, "killed on request; supervisor was not running and a stranger held the task's lock")
	return st, true, err
}

// endOrphan reports a final status as it is, or kills the recorded tool
// group of a running one and writes its killed status.
func endOrphan(dir, msg string) (*wire.Status, error) {
	st, err := taskfiles.ReadStatus(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no %s in %s: nothing to kill", taskfiles.FileStatus, dir)}
	}
	if err != nil {
		return nil, errkind.IO(err)
	}
	if st.Final() {
		return st, nil
	}
	st.Status, st.ErrorClass = wire.StatusKilled, wire.ClassKilled
	st.Error = msg
	st.CompletedAt = taskfiles.Timestamp(time.Now())
	st.ExitCode = -1
	// The group to kill is the process record's; status.json's tool_pid is
	// the task's to forge. Whatever the record does not vouch for is left
	// alone, and said so in wrapper.log.
	rec, err := proc.ReadRecord(dir)
	// The supervisor that would have read the usage is gone; what it
	// stored of the tool's output may still hold some. Which agent ran is
	// the record's word, not launch.json's, which the task could rewrite.
	st.TokensIn, st.TokensOut, st.CostUSD = 0, 0, 0
	if tail, terr := agentlog.ReadLogTail(filepath.Join(dir, taskfiles.FileLog), agentlog.UsageTail); terr == nil && err == nil {
		st.TokensIn, st.TokensOut, st.CostUSD = agentlog.ParseUsage(rec.Agent, tail)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		taskfiles.LogWrapper(dir, "kill: no process record; signalling nothing")
	case err != nil:
		taskfiles.LogWrapper(dir, "kill: signalling nothing: %v", err)
	default:
		err := rec.KillToolGroup(syscall.SIGKILL)
		switch {
		case err == nil:
			st.Signal = proc.SignalName(syscall.SIGKILL)
			taskfiles.LogWrapper(dir, "kill: killed the tool group %d of attempt %d, whose supervisor was gone", rec.ToolPGID, rec.Attempt)
		case !errors.Is(err, proc.ErrNoGroup):
			taskfiles.LogWrapper(dir, "kill: not killing the recorded tool group: %v", err)
		}
	}
	if err := taskfiles.WriteStatusDurable(dir, st); err != nil {
		return nil, errkind.IO(err)
	}
	nodestatus.UnmarkLive(dir, st.Attempt)
	return st, nil
}
