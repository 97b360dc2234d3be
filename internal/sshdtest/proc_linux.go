package sshdtest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

const canListDescendants = true

// sysProcAttr has the kernel kill sshd if the test binary dies without
// cleaning up (a panic, a -timeout), so no sshd outlives it holding a port.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// freezeDescendants sends SIGSTOP to every process under root, repeating
// until a pass finds no new one, so none can fork behind its back, and
// returns their pids. The caller stops root first.
func freezeDescendants(root int) []int {
	seen := map[int]bool{}
	var all []int
	for {
		found := false
		for _, pid := range descendants(root) {
			if seen[pid] {
				continue
			}
			seen[pid] = true
			found = true
			all = append(all, pid)
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		if !found {
			return all
		}
	}
}

// descendants lists the processes under root by walking parent links in
// /proc. Processes come and go while it reads; those that vanish are left out.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentOf reads the parent pid from /proc/PID/stat, whose second field (the
// command name, in parentheses) may itself hold spaces and parentheses.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	return ppid, err == nil
}
