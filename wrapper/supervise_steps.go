package wrapper

// One attempt as steps: workspace, network, setup, the tool under its
// limits, what is collected of its result (package attempt decides).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// run runs the attempt to its end and writes the final status.
func (s *supervisor) run() {
	timeout := seconds(s.launch.TimeoutSeconds)
	timer := time.AfterFunc(timeout-time.Since(s.begun), func() {
		s.stop(attempt.ReasonTimeout, seconds(s.launch.GraceSeconds))
	})
	s.deadline = timer
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go s.heartbeats(hbStop, hbDone)
	s.background(func() { s.watchStall(hbStop) })

	res := s.attempt()
	s.stopNet()
	s.removeAgentLogins()
	s.endCgroup(res)

	timer.Stop()
	close(hbStop)
	<-hbDone
	s.finish(res)
}

// attempt runs one attempt's steps in order, each a function of its own:
// prepare the workspace (prepareWorkspace), the sandbox's network
// (startNet; the sandbox plan itself was decided by startAttempt), setup
// (runSetup), the tool under its limits (runTool), then what is collected
// of its result (collect: the git result, the gate). The final status is
// finish's, from the outcome returned here.
func (s *supervisor) attempt() outcome {
	out := filepath.Join(s.dir, taskfiles.DirOutput)
	if s.sandboxErr != "" {
		return outcome{code: -1, startErr: s.sandboxErr, permanent: s.sandboxPermanent}
	}
	if res, ok := s.prepareWorkspace(out); !ok {
		return res
	}
	if err := s.startNet(); err != nil {
		return outcome{code: -1, startErr: err.Error()}
	}
	if res, ok := s.runSetup(out); !ok {
		return res
	}
	res, ran := s.runTool(out)
	if ran {
		s.collect(&res, out)
	}
	return res
}

// runTool starts the tool in out under the attempt's limits and waits for
// it; ran is false when it never ran (res says why).
func (s *supervisor) runTool(out string) (res outcome, ran bool) {
	cmd, closers, err := s.toolCmd(out)
	if err != nil {
		var pe permanentError
		o := outcome{code: -1, startErr: err.Error(), permanent: errors.As(err, &pe)}
		if errors.Is(err, exec.ErrNotFound) {
			o.toolMissing = true
			o.startErr = fmt.Sprintf("%s; fix: install it on node %s (in the PATH of the node user's non-interactive shell, or in the api_mode's PATH), or give the task or the node another tool", err, s.launch.Node)
		}
		return o, false
	}
	s.mu.Lock()
	s.toolStarted = true
	s.mu.Unlock()
	p, err := s.startChild(cmd, closers...)
	if errors.Is(err, tree.ErrStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("start %s: %v", cmd.Args[0], err)}, false
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	s.logger.Info("tool started", taskfiles.LogKeyToolPID, p.Pgid)
	<-p.Exited
	s.mu.Lock()
	s.finishing = true
	s.mu.Unlock()
	<-p.Done
	code, sig := p.ExitInfo()
	return outcome{code: code, sig: sig, confined: s.sandbox != nil}, true
}

// toolEnd is how the tool ended, for attempt.Collect.
func (s *supervisor) toolEnd(res outcome) attempt.ToolEnd {
	return attempt.ToolEnd{Code: res.code, Sig: res.sig, Stopping: s.stopping(), Repo: s.launch.Repo != nil, Gate: s.launch.Gate != nil}
}

// collect records what attempt.Collect says of the tool's end: the git
// result, then the gate on it.
func (s *supervisor) collect(res *outcome, out string) {
	if snap, _ := attempt.Collect(s.toolEnd(*res), false); snap {
		res.commit, res.resultErr = s.snapshot(s.launch.Repo, out)
	}
	if _, runGate := attempt.Collect(s.toolEnd(*res), res.resultErr == ""); !runGate {
		return
	}
	// The gate has its own timeout, and a kill stops it as it would
	// the tool.
	s.deadline.Stop()
	s.mu.Lock()
	s.finishing, s.gating = false, true
	s.mu.Unlock()
	if err := s.updateStatus(func(st *wire.Status) bool { st.Gating = true; return true }); err != nil {
		s.logger.Warn("write status", taskfiles.LogKeyErr, err)
	}
	res.gate = s.runGate(out, res.commit)
	s.mu.Lock()
	s.finishing, s.gating = true, false
	s.mu.Unlock()
}

// prepareWorkspace fills output/ (out) for a new attempt: the base tree's
// copy, or a git-native task's checkout; a resumed attempt keeps its own.
// false means the attempt ends with res.
func (s *supervisor) prepareWorkspace(out string) (res outcome, ok bool) {
	if s.launch.Resume && s.keptOutput {
		return outcome{}, true
	}
	if s.launch.Base != "" {
		err := s.copyBase(out)
		if errors.Is(err, tree.ErrStopped) {
			return outcome{code: -1}, false
		}
		if err != nil {
			return outcome{code: -1, startErr: err.Error()}, false
		}
	}
	r := s.launch.Repo
	if r == nil {
		return outcome{}, true
	}
	if s.stopping() {
		return outcome{code: -1}, false
	}
	gitDir, err := gitresult.SnapshotDir(s.dir)
	spare := false
	if err == nil {
		spare, err = gitresult.PrepareRepoWorkspace(context.Background(), r.Dir, r.Base, r.Branch, out, gitDir, r.Spares > 0, s.checkoutPlaces())
	}
	if errors.Is(err, gitresult.ErrStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("prepare the git workspace: %v", err)}, false
	}
	if r.Spares > 0 {
		s.logger.Info("git workspace ready", "from_spare", spare)
		s.startSpare(r)
	}
	return outcome{}, true
}

// checkoutPlaces bounds the node's checkouts at once to its cores (see
// gitresult.Checkouts); without the private .ctl directory, nothing bounds them.
func (s *supervisor) checkoutPlaces() *gitresult.Checkouts {
	ctl, err := proc.CtlDir()
	if err != nil {
		return nil
	}
	return &gitresult.Checkouts{Dir: ctl, N: runtime.NumCPU(), Stop: s.stopping,
		OnWait: func() { s.logger.Info("waiting for a checkout place", "places", runtime.NumCPU()) }}
}

// runSetup runs launch.json's setup in out, as the tool will run: in the
// sandbox and under the limits. false means the attempt ends with res.
func (s *supervisor) runSetup(out string) (res outcome, ok bool) {
	if s.launch.Setup == "" {
		return outcome{}, true
	}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", s.launch.Setup}, Env: s.env, Dir: out}
	if s.sandbox != nil {
		cmd = s.sandboxed(cmd)
	}
	cmd, err := s.limited(cmd)
	if err != nil {
		return outcome{code: -1, startErr: "setup failed: " + err.Error()}, false
	}
	p, err := s.startChild(cmd)
	if errors.Is(err, tree.ErrStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("setup failed: %v", err)}, false
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	<-p.Done
	code, sig := p.ExitInfo()
	if s.stopping() {
		return outcome{code: code, sig: sig}, false
	}
	if code != 0 || sig != 0 {
		msg := "setup failed: " + proc.ExitError(code, sig)
		if line := s.tlog.LastLine(); line != "" {
			msg += ": " + line
		}
		return outcome{code: -1, startErr: msg, confined: s.sandbox != nil}, false
	}
	return outcome{}, true
}

// startSpare starts `git-spare` in the background, in a session of its
// own, for the next launch of the project on this node to find a ready
// checkout of r's base. It outlives the attempt; its failure costs only
// a slower next launch (wrapper.log says why it could not start).
func (s *supervisor) startSpare(r *wire.LaunchRepo) {
	exe, err := os.Executable()
	if err != nil {
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	defer null.Close()
	cmd := &exec.Cmd{Path: exe, Args: []string{exe, "git-spare", "--repo", r.Dir, "--base", r.Base, "--max", strconv.Itoa(r.Spares)},
		Dir: "/", Stdin: null, Stdout: null, Stderr: null, Env: gitresult.GitEnv(),
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	go cmd.Wait() // reaped while this supervisor lives; adopted by init after
}

// snapshot records a git-native task's workspace as one commit (see
// gitresult.SnapshotWorkspace) in the wrapper's private git directory of the task.
func (s *supervisor) snapshot(r *wire.LaunchRepo, out string) (string, string) {
	gitDir, err := gitresult.SnapshotDir(s.dir)
	if err == nil {
		msg := r.Message
		if msg == "" {
			msg = fmt.Sprintf("%s (attempt %d)", s.launch.Task, s.launch.Attempt)
		}
		var commit string
		commit, err = gitresult.SnapshotWorkspace(context.Background(), r.Dir, gitDir, out, r.Base, r.Branch, "dispatch "+s.launch.Task, msg)
		if err == nil {
			s.logger.Info("result recorded", "commit", commit)
			return commit, ""
		}
	}
	return "", "recording the workspace as a commit failed: " + err.Error()
}

// toolCmd builds the tool's command from launch.json. Files in the returned
// closers are the parent's copies, to close once the tool has started.
// permanentError marks a start error that no retry mends (class
// start_permanent).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func (s *supervisor) toolCmd(out string) (*exec.Cmd, []io.Closer, error) {
	spec := filepath.Join(s.dir, taskfiles.FileSpec)
	command, env := s.toolArgvEnv()
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, "{spec}", spec)
	}
	path, err := proc.LookPath(args[0], proc.LookupEnv(env, "PATH"), out)
	if err != nil {
		return nil, nil, fmt.Errorf("start tool: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: args, Env: env, Dir: out}
	if s.sandbox != nil {
		if err := s.sandbox.ExposeTool(path, s.launch.WorkDir); err != nil {
			return nil, nil, permanentError{fmt.Errorf("start tool in the sandbox: %w", err)}
		}
		cmd = s.sandboxed(cmd)
	}
	cmd, err = s.limited(cmd)
	if err != nil {
		return nil, nil, err
	}
	var closers []io.Closer
	if s.launch.Stdin == "resume" {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("tool stdin: %w", err)
		}
		// A short text: it fits the pipe, the write does not block.
		go func() {
			io.WriteString(w, s.launch.ResumePrompt)
			w.Close()
		}()
		cmd.Stdin = r
		closers = append(closers, r)
	} else if s.launch.Stdin == "spec" {
		f, err := os.Open(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("open tool stdin: %w", err)
		}
		cmd.Stdin = f
		closers = append(closers, f)
	}
	return cmd, closers, nil
}
