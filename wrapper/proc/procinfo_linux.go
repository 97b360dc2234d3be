package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// StatFields returns the fields of /proc/<pid>/stat after the command name:
// fields[0] is the state (field 3 of proc(5)), fields[2] the process group,
// fields[3] the session and fields[19] the start time.
func StatFields(pid string) ([]string, error) {
	data, err := readProcFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, err
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(fields))
	}
	return fields, nil
}

// readProcFile reads a small file of /proc (at most 4 KiB) in three calls:
// os.ReadFile adds six (the runtime's poller, a stat for the size), and
// findGroupMember reads one of these for every process of the machine.
func readProcFile(path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// ProcStart is when process pid started, in clock ticks after boot (field 22
// of /proc/<pid>/stat): with the pid, it names one process for the life of
// the system. A zombie counts as gone: it runs nothing and takes no signal,
// and where nobody reaps (a container's init) it lingers.
func ProcStart(pid int) (string, error) {
	fields, err := StatFields(strconv.Itoa(pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no process %d: %w", pid, syscall.ESRCH)
		}
		return "", err
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return "", fmt.Errorf("process %d is a zombie: %w", pid, syscall.ESRCH)
	}
	return fields[19], nil
}

// GroupInSession reports whether a live (not zombie) process of group pgid
// is in session sid.
func GroupInSession(pgid, sid int) (bool, error) {
	return findGroupMember(pgid, sid)
}

// GroupAlive reports whether process group pgid has a member that is not a
// zombie. kill(-pgid, 0) alone would count zombies, which linger where init
// does not reap (containers), and call a killed group alive.
func GroupAlive(pgid int) bool {
	found, _ := findGroupMember(pgid, -1)
	return found
}

// findGroupMember scans /proc for a live (not zombie) process of group
// pgid, in session sid unless sid is -1.
func findGroupMember(pgid, sid int) (bool, error) {
	// A group with no process at all (the usual end of an attempt) is
	// told by one kill(2) with signal 0, without reading every process of
	// the machine; only a group that still has a member, perhaps a zombie,
	// is looked for in /proc.
	if pgid > 1 {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	want, wantSID := strconv.Itoa(pgid), strconv.Itoa(sid)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		fields, err := StatFields(e.Name())
		if err != nil || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if fields[2] == want && (sid == -1 || fields[3] == wantSID) {
			return true, nil
		}
	}
	return false, nil
}

// childAttr is how setup and the tool are started: in their own process
// group, and killed by the kernel when the supervisor dies (the thread that
// started them stays locked, see StartProc), so that a supervisor killed
// with SIGKILL leaves no tool running beside the retry.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Getsid returns the session of process pid (0: the caller).
func Getsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}
