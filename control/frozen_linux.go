package control

import (
	"net"
	"os"
	"strconv"
	"syscall"
)

// peerPID is the pid of the process at the other end of a unix socket
// connection (SO_PEERCRED), 0 when it cannot be read.
func peerPID(conn net.Conn) int {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// processFrozen reports whether process pid is stopped, from
// /proc/<pid>/stat; a process that cannot be read is not said frozen.
func processFrozen(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && statStopped(stat)
}
