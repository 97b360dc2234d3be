// Package slurmtest runs a real one-host Slurm cluster for tests: munged,
// slurmctld and slurmd from Debian's slurm-wlm, each in the foreground,
// with their configuration, state, spool and munge key in a temporary
// directory and their ports chosen free on loopback, so several clusters
// (one per test) run side by side and none touches /etc/slurm.
//
// A test calls Start: it skips when the tests do not run as root, and when
// slurm-wlm is missing, except under CI=true, where a missing slurm-wlm
// fails the test, as a missing sshd does (internal/sshdtest). The client commands
// (sbatch, squeue, scancel, scontrol) find the cluster through SLURM_CONF
// (Cluster.Env). StopController and StartController take slurmctld away and
// bring it back (squeue failing, a controller restart with jobs queued);
// Drain and Resume change the node's state as an administrator would.
// Everything is stopped with t.Cleanup.
package slurmtest
