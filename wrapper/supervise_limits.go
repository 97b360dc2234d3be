package wrapper

// The supervisor's side of an attempt's limits (package limits): the
// watchdog's stop, a refused fork, the cgroups' verdict at the end.

import (
	"syscall"

	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// watchLimits watches the running child p until it exits: it reads the
// attempt's cgroups' counters (an OOM kill, a refused fork) and samples
// the processes for the limits no cgroup enforces. Past a limit, it stops
// the attempt and kills its processes, and goes on killing what it finds
// until p exits.
func (s *supervisor) watchLimits(p *proc.Proc) {
	limits.Watchdog(s.launch.Limits, s.cg, p, s.limitStop, s.logger)
}

// nprocRefused reports whether the tool failed because RLIMIT_NPROC, set
// for it as the pids limit's backstop, refused a fork (see limits.ForkRefused).
func (s *supervisor) nprocRefused(res outcome) bool {
	return s.nproc > 0 && (res.code != 0 || res.sig != 0) && limits.ForkRefused(s.tlog.Tail())
}

// endCgroup gives the attempt the class of a limit its cgroups enforced
// that the watchdog did not see in time (the child ended first), then
// kills what is left in them (a process that left the tool's group
// included) and removes them.
func (s *supervisor) endCgroup(res outcome) {
	cg := s.cg
	if cg == nil {
		return
	}
	l := s.launch.Limits
	kills := cg.OomKills()
	oom := l.MemoryBytes > 0 && (kills > 0 || kills < 0 && cg.MemoryFailures() > 0 && res.sig == syscall.SIGKILL)
	pids := l.Pids > 0 && cg.PidsRefused() > 0
	s.mu.Lock()
	if s.stopReason == "" {
		switch {
		case oom:
			s.stopReason, s.limitMsg = limits.ReasonOOM, limits.OomMessage(l)
		case pids:
			s.stopReason, s.limitMsg = limits.ReasonPids, limits.PidsMessage(l)
		}
	}
	s.mu.Unlock()
	if err := cg.Remove(); err != nil {
		s.logger.Warn("limits: remove the attempt's cgroup", taskfiles.LogKeyErr, err)
	}
}
