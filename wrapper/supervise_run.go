package wrapper

// The attempt while it runs: its children, stops, signals, heartbeats,
// process record, status.json and the final status.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/gate"
	"github.com/dispatch-tool/dispatch/wrapper/kill"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// startChild starts cmd unless a stop has been asked for. Checking and
// starting under one lock means a kill either finds the child to signal or
// prevents it from starting; it cannot slip in between.
func (s *supervisor) startChild(cmd *exec.Cmd, closers ...io.Closer) (*proc.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		for _, c := range closers {
			c.Close()
		}
		return nil, tree.ErrStopped
	}
	p, err := proc.StartProc(cmd, s.tlog, closers...)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

// startChildTo is startChild with the child's output to out instead of
// the task log.
func (s *supervisor) startChildTo(cmd *exec.Cmd, out io.Writer) (*proc.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		return nil, tree.ErrStopped
	}
	p, err := proc.StartProc(cmd, out)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

func (s *supervisor) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopReason != ""
}

// stop asks the running child's group to end: SIGTERM now, SIGKILL after
// grace if the child is still there. Only the first reason counts.
func (s *supervisor) stop(reason string, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" || s.finishing {
		return
	}
	s.stopReason = reason
	s.logger.Info("stopping attempt", taskfiles.LogKeyReason, reason, taskfiles.LogKeyGrace, grace)
	p := s.cur
	if p == nil {
		return
	}
	select {
	case <-p.Exited:
		return
	default:
	}
	if s.sandbox != nil {
		limits.TermSandboxed(p.Pgid)
	} else {
		syscall.Kill(-p.Pgid, syscall.SIGTERM)
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.Exited:
		case <-t.C:
			s.logger.Info("grace over, killing tool group", taskfiles.LogKeyPGID, p.Pgid)
			syscall.Kill(-p.Pgid, syscall.SIGKILL)
		}
	}()
}

// limitStop marks the attempt as stopped by the watchdog for reason, with
// msg for its status, unless a stop was asked already or the tool has
// ended. It reports whether the watchdog is to kill the processes.
func (s *supervisor) limitStop(reason, msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" || s.finishing {
		return false
	}
	s.stopReason, s.limitMsg = reason, msg
	s.logger.Info("stopping attempt", taskfiles.LogKeyReason, reason, taskfiles.LogKeyError, msg)
	return true
}

// onLine stops the tool when a line of its output announces a retry that
// dispatch handles better than the tool (see agentlog.RetryNotice).
func (s *supervisor) onLine(prev, line []byte) {
	if id := agentlog.SessionID(line); id != "" {
		s.mu.Lock()
		// The tool's own first init line, not one printed by setup.
		if s.session == "" && s.toolStarted {
			s.session = id
		}
		s.mu.Unlock()
	}
	now := time.Now()
	n, ok := agentlog.RetryNotice(s.launch.Agent, prev, line, now)
	if !ok || !n.Stops() {
		return
	}
	s.mu.Lock()
	if s.stopReason == "" && !s.finishing {
		s.notice, s.noticeAt = n, now
	}
	s.mu.Unlock()
	s.stop(attempt.ReasonNotice, seconds(s.launch.GraceSeconds))
}

// handleSignals turns SIGTERM and SIGINT into a stop of every attempt, and
// SIGUSR1 into a stop of each attempt `kill` asked for. SIGHUP is ignored
// in case a session somewhere still thinks it owns us.
func handleSignals(sigs <-chan os.Signal, set *attemptSet) {
	for sig := range sigs {
		switch sig {
		case syscall.SIGHUP:
		case syscall.SIGUSR1:
			for _, s := range set.attempts(false) {
				if grace, ok := s.killRequested(); ok {
					s.stop(attempt.ReasonKill, grace)
				}
			}
		default:
			for _, s := range set.attempts(true) {
				grace, ok := s.killRequested()
				if !ok {
					grace = seconds(s.launch.GraceSeconds)
				}
				s.stop(attempt.ReasonKill, grace)
			}
		}
	}
}

// killRequested reports whether `kill` asked to stop this attempt, with the
// grace it gave, and takes the request. The request lives in the private
// .ctl directory, out of the tasks' reach, and names the attempt, so that
// a request left over from an earlier attempt stops nothing.
func (s *supervisor) killRequested() (time.Duration, bool) {
	path, err := proc.KillRequestPath(s.dir)
	if err != nil {
		return 0, false
	}
	data, err := taskfiles.ReadControlFile(path)
	if err != nil {
		return 0, false
	}
	var req kill.Request
	if err := json.Unmarshal(data, &req); err != nil || req.Attempt != s.launch.Attempt {
		return 0, false
	}
	os.Remove(path)
	if req.GraceSeconds < 0 {
		return seconds(s.launch.GraceSeconds), true
	}
	return seconds(req.GraceSeconds), true
}

func (s *supervisor) heartbeats(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(seconds(s.launch.HeartbeatSeconds))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := s.beat(); err != nil {
				s.logger.Warn("heartbeat", taskfiles.LogKeyErr, err)
			}
			total := s.tlog.Total()
			err := s.updateStatus(func(st *wire.Status) bool {
				changed := st.LogBytes != total
				st.LogBytes = total
				if changed && s.activeAt.Load() != 0 {
					// Output, seen at the beat's pace: the stall watch
					// looks less often.
					s.activeAt.Store(time.Now().UnixNano())
				}
				return changed
			})
			if err != nil {
				s.logger.Warn("update status", taskfiles.LogKeyErr, err)
			}
		}
	}
}

// beat rewrites the heartbeat file; the sequence number makes every beat's
// content differ even if the clock does not move.
func (s *supervisor) beat() error {
	s.hbSeq++
	data := taskfiles.HeartbeatLine(s.hbSeq, time.Now(), s.activeAt.Load())
	return taskfiles.WriteFileAtomic(filepath.Join(s.dir, taskfiles.FileHeartbeat), []byte(data), 0o644)
}

// ownRecord makes this supervisor's process record, with no tool yet:
// without a record, nothing could ever signal this attempt. writeRecord
// writes it.
func (s *supervisor) ownRecord() error {
	id, err := self()
	if err != nil {
		return err
	}
	pid, start, sid := id.pid, id.start, id.sid
	s.rec = proc.ProcRecord{Dir: filepath.Clean(s.dir), Attempt: s.launch.Attempt, SupervisorPID: pid, SupervisorStart: start, SID: sid,
		Agent: s.launch.Agent, Node: s.launch.Node}
	return nil
}

// selfID is what a process record says of its supervisor.
type selfID struct {
	pid, sid int
	start    string
}

// self is this supervisor's pid, start time and session, read once a
// process, not once an attempt: none changes while it runs. A failed read
// (out of descriptors, a `ps` that could not fork on Darwin) is not kept:
// the next attempt of the batch reads again.
var self = keepSuccess(readSelf).get

func readSelf() (selfID, error) {
	id := selfID{pid: os.Getpid()}
	var err error
	if id.start, err = proc.ProcStart(id.pid); err != nil {
		return id, fmt.Errorf("read own start time: %w", err)
	}
	if id.sid, err = proc.Getsid(0); err != nil {
		return id, fmt.Errorf("read own session: %w", err)
	}
	return id, nil
}

// successOnce is sync.OnceValues that keeps only a success: read is
// called until it returns no error, then never again.
type successOnce[T any] struct {
	mu   sync.Mutex // guards ok and v
	ok   bool
	v    T
	read func() (T, error)
}

func keepSuccess[T any](read func() (T, error)) *successOnce[T] {
	return &successOnce[T]{read: read}
}

// get returns the value read, reading it when no read has succeeded yet.
func (o *successOnce[T]) get() (T, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ok {
		return o.v, nil
	}
	v, err := o.read()
	if err != nil {
		return v, err
	}
	o.v, o.ok = v, true
	return v, nil
}

// writeRecord replaces the process record with rec.
func (s *supervisor) writeRecord() error {
	s.recorded = true
	return proc.WriteRecord(&s.rec)
}

// toolPIDAfter is how long a child runs before status.json is rewritten
// with its pid: one that ends sooner has it in the next status written
// (the final one, or the gate's). Each status.json written is a new
// inode, on a busy node's ext4 a scan past every inode freed lately: that
// rewrite, for display only (kill trusts the process record alone), was
// 0.5-0.7 ms of CPU of a no-op attempt on a loaded 2-core node, where
// such a tool under bwrap takes 200-600 ms.
const toolPIDAfter = time.Second

// setTool records the running child (setup or tool) in the process record
// at once and, for display, in status.json once it has run for
// toolPIDAfter.
func (s *supervisor) setTool(p *proc.Proc) {
	s.rec.ToolPGID, s.rec.ToolStart = p.Pgid, p.Start
	if err := s.writeRecord(); err != nil {
		s.logger.Error("process record", taskfiles.LogKeyErr, err)
	}
	pid := p.Pgid
	// In memory now, so that any status written from here on has it.
	_ = s.updateStatus(func(st *wire.Status) bool {
		st.ToolPID = pid
		return false
	})
	s.background(func() {
		t := time.NewTimer(toolPIDAfter)
		defer t.Stop()
		select {
		case <-p.Exited:
			return
		case <-t.C:
		}
		err := s.updateStatus(func(st *wire.Status) bool { return st.ToolPID == pid })
		if err != nil {
			s.logger.Warn("update status", taskfiles.LogKeyErr, err)
		}
	})
}

// updateStatus applies f to the status and writes it when f reports a
// change. Once a final status is written, it never changes again.
func (s *supervisor) updateStatus(f func(*wire.Status) bool) error {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if s.final {
		return nil
	}
	if !f(&s.st) {
		return nil
	}
	s.final = s.st.Final()
	if s.final {
		return taskfiles.WriteStatusDurable(s.dir, &s.st)
	}
	return taskfiles.WriteJSONAtomic(filepath.Join(s.dir, taskfiles.FileStatus), s.st)
}

// ending is what the final status depends on (attempt.Decide), read once
// the attempt has ended.
func (s *supervisor) ending(res outcome, reason, limitMsg string, ended time.Time) attempt.Ending {
	e := attempt.Ending{Reason: reason, LimitMsg: limitMsg, Code: res.code, Sig: res.sig,
		StartErr: res.startErr, Permanent: res.permanent, ToolMissing: res.toolMissing,
		ResultErr: res.resultErr, Commit: res.commit, Gate: res.gate, GateDecides: s.launch.Gate != nil && s.launch.Gate.Decides,
		Agent: s.launch.Agent, Stall: seconds(s.launch.StallSeconds), Timeout: seconds(s.launch.TimeoutSeconds), Ended: ended}
	s.mu.Lock()
	e.Notice, e.NoticeAt = s.notice, s.noticeAt
	s.mu.Unlock()
	if s.nprocRefused(res) {
		e.NprocRefused, e.NprocMsg = true, limits.NprocMessage(s.launch.Limits, s.nproc-s.launch.Limits.Pids)
	}
	if res.code != 0 && res.sig == 0 {
		e.LogTail = s.tlog.Tail()
	}
	return e
}

// finish writes the final status of the attempt.
func (s *supervisor) finish(res outcome) {
	if res.startErr != "" {
		// The log the report points to says why nothing ran.
		fmt.Fprintf(s.tlog, "dispatch-wrapper: %s\n", res.startErr)
	}
	s.mu.Lock()
	reason, session, limitMsg := s.stopReason, s.session, s.limitMsg
	s.mu.Unlock()
	if session != "" || res.gate != nil || !s.recorded {
		// The private record is where `status` takes the session and
		// the gate's result from; a quick start whose tool never
		// started has not written it yet.
		s.rec.SessionID, s.rec.Gate = session, res.gate
		if err := s.writeRecord(); err != nil {
			s.logger.Error("process record", taskfiles.LogKeyErr, err)
		}
	}
	ended := time.Now()
	if err := s.tlog.Err(); err != nil {
		s.logger.Error("task log incomplete", taskfiles.LogKeyErr, err)
	}
	// Read back from the file, which holds far more than the in-memory
	// tail; the tool and setup are gone, so it no longer changes. It is
	// the file the log wrote, whatever the task put at its path.
	tail, err := s.tlog.ReadTail(agentlog.UsageTail)
	if err != nil {
		s.logger.Warn("read task log for usage", taskfiles.LogKeyErr, err)
	}
	tokensIn, tokensOut, cost := agentlog.ParseUsage(s.launch.Agent, tail)
	message := agentlog.FinalMessage(s.launch.Agent, tail)
	f := attempt.Decide(s.ending(res, reason, limitMsg, ended))
	var final wire.Status
	err = s.updateStatus(func(st *wire.Status) bool {
		defer func() { final = *st }()
		st.CompletedAt = taskfiles.Timestamp(ended)
		st.ExitCode = res.code
		st.LogBytes = s.tlog.Total()
		st.TokensIn, st.TokensOut, st.CostUSD = tokensIn, tokensOut, cost
		st.FinalMessage = message
		st.SessionID, st.Gate, st.Gating = session, gate.ForStatus(res.gate), false
		defer st.Clamp()
		if res.sig != 0 {
			st.Signal = proc.SignalName(res.sig)
		}
		st.Status, st.ErrorClass, st.Error = f.Status, f.Class, f.Error
		if f.Commit != "" {
			st.Commit = f.Commit
		}
		if f.Class == wire.ClassStart || f.Class == wire.ClassStartPermanent {
			st.ToolMissing = f.ToolMissing
		}
		if f.RetryAfterSeconds != 0 {
			st.RetryAfterSeconds = f.RetryAfterSeconds
		}
		st.Error += s.failureNote(st, res)
		return true
	})
	if err != nil {
		s.logger.Error("write final status", taskfiles.LogKeyErr, err)
		return
	}
	// Out of the live index only now: until the final status is on disk
	// the attempt must be reported, and a supervisor killed before this
	// line leaves its marker for the controller to find.
	nodestatus.UnmarkLive(s.dir, s.launch.Attempt)
	s.logger.Info("attempt finished", taskfiles.LogKeyStatus, final.Status, taskfiles.LogKeyErrorClass, final.ErrorClass, taskfiles.LogKeyError, final.Error)
}
