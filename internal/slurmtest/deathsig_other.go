//go:build !linux

package slurmtest

import "syscall"

// dieWithParent: only Linux has a parent-death signal (and slurm-wlm);
// elsewhere the daemons are stopped by the cluster's cleanup alone.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
