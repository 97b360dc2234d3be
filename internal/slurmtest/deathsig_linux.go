package slurmtest

import "syscall"

// dieWithParent makes a daemon die with the test that started it, so a
// test killed mid-way leaves no Slurm daemon behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
