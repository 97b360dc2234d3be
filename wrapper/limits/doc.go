// Package limits owns how an attempt's launch.json limits (cpu, memory,
// pids, file_size) are enforced on a node: the cgroup plan read from
// /proc/self/mountinfo and /proc/self/cgroup (v1 or v2, delegated or not:
// PlanCgroups, OwnCgroupPlan), the attempt's cgroups themselves
// (NewAttemptCgroup, AttemptCgroup: limits set, counters read, removal),
// the rlimits limit-exec sets before it executes the child (CmdLimitExec,
// LimitArgs), and the watchdog (Watchdog) that samples /proc for the
// limits no cgroup enforces and kills past them (ReasonOOM, ReasonPids).
//
// It does not decide what an attempt's final status is (the supervisor
// does, from the reason the watchdog gave). Linux only; elsewhere an
// attempt with a memory, pids or file_size limit is refused. It imports
// wire, wrapper/errkind, wrapper/proc and wrapper/taskfiles.
package limits
