package proc

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// psTimeout bounds one ps(1) call.
const psTimeout = 5 * time.Second

func ps(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), psTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/bin/ps", args...).Output()
	return string(out), err
}

// ProcStart is when process pid started, as ps(1) prints it (to the
// second): with the pid, it names one process for all practical purposes.
func ProcStart(pid int) (string, error) {
	out, err := ps("-o", "lstart=", "-p", strconv.Itoa(pid))
	start := strings.Join(strings.Fields(out), " ")
	if err != nil || start == "" {
		return "", fmt.Errorf("no process %d: %w", pid, syscall.ESRCH)
	}
	return start, nil
}

// GroupInSession reports whether a live (not zombie) process of group pgid
// is in session sid.
func GroupInSession(pgid, sid int) (bool, error) {
	out, err := ps("-A", "-o", "pid=,pgid=,stat=")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != strconv.Itoa(pgid) || strings.HasPrefix(f[2], "Z") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if s, err := syscall.Getsid(pid); err == nil && s == sid {
			return true, nil
		}
	}
	return false, nil
}

// GroupAlive reports whether process group pgid still has a member; launchd
// reaps orphans, so zombies do not linger as they can on Linux.
func GroupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}

// childAttr is how setup and the tool are started: in their own process
// group. macOS has no parent-death signal; a tool its supervisor left behind
// is killed by `kill` (through the process record) before a retry.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// Getsid returns the session of process pid (0: the caller).
func Getsid(pid int) (int, error) { return syscall.Getsid(pid) }
