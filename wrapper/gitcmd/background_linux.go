package gitcmd

import "syscall"

// background lowers this process's CPU and disk priority (nice 10, I/O
// class idle), for work no attempt waits for; its children inherit it.
func background() {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, 10)
	const whoProcess, classIdle = 1, 3
	_, _, _ = syscall.Syscall(syscall.SYS_IOPRIO_SET, whoProcess, 0, classIdle<<13)
}
