//go:build !linux

package gitcmd

import "syscall"

// background lowers this process's CPU priority (nice 10), for work no
// attempt waits for; its children inherit it.
func background() {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, 10)
}
