package wrapper

// The supervisor's limited child on Linux: rlimits through limit-exec and
// the attempt's cgroups.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// limited returns cmd run through limit-exec when launch.json asks for an
// rlimit or the attempt has cgroups; as it is, otherwise.
func (s *supervisor) limited(cmd *exec.Cmd) (*exec.Cmd, error) {
	l := s.launch.Limits
	if l == nil {
		return cmd, nil
	}
	s.makeCgroup()
	nproc := 0
	if l.Pids > 0 && os.Geteuid() != 0 && !s.cg.Has(limits.CtrlPids) {
		// A backstop only (see package limits): the watchdog counts exactly.
		procs, _ := limits.ScanProcs()
		nproc = l.Pids + limits.UserThreads(procs, os.Getuid())
	}
	s.nproc = nproc
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("limits: find own executable: %w", err)
	}
	var dirs []string
	if s.cg != nil {
		dirs = s.cg.Dirs
	}
	argv := limits.LimitArgs(exe, l, nproc, dirs, cmd)
	if argv == nil {
		return cmd, nil
	}
	return &exec.Cmd{Path: exe, Args: argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin}, nil
}

// makeCgroup makes the attempt's cgroups, with its first limited child,
// where the node has usable ones; when that fails the watchdog enforces
// memory and pids, and wrapper.log says why.
func (s *supervisor) makeCgroup() {
	if s.cgTried {
		return
	}
	s.cgTried = true
	l := s.launch.Limits
	if l.CPU <= 0 && l.MemoryBytes <= 0 && l.Pids <= 0 {
		return // file_size only: an rlimit
	}
	p, err := limits.CgroupsReady()
	if p == nil && err == nil && l.CPU > 0 {
		s.logger.Warn("limits: cpu is not enforced: no cgroup", taskfiles.LogKeyReason, limits.OwnCgroupPlan().Why)
	}
	if err == nil && p != nil {
		stem := limits.CgroupStem(s.launch.Project, s.launch.Task, s.dir)
		s.cg, err = limits.NewAttemptCgroup(p, stem, limits.CgroupName(stem, s.launch.Attempt, os.Getpid()), s.launch.Limits, s.logger)
	}
	if err != nil {
		s.logger.Warn("limits: no cgroup; the watchdog enforces memory and pids, cpu is not enforced", taskfiles.LogKeyErr, err)
		return
	}
	if s.cg != nil {
		s.logger.Info("limits: cgroup", taskfiles.LogKeyPath, strings.Join(s.cg.Dirs, " "))
	}
}
