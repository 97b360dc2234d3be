package wrapper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// watchdogInterval is how often the watchdog samples an attempt's
// processes.
const watchdogInterval = 200 * time.Millisecond

// limitEnforcement is how this node enforces limits.
func limitEnforcement() string { return EnforceRlimits }

// cmdLimitExec sets the rlimits its flags give and executes the program:
// it runs between the supervisor and the child, so that only the child
// and what it starts are bound.
func cmdLimitExec(args []string) error {
	fs := newFlagSet(limitExecCommand)
	fsize := fs.Int64("fsize", 0, "RLIMIT_FSIZE in bytes")
	nproc := fs.Int64("nproc", 0, "RLIMIT_NPROC")
	if err := fs.Parse(args); err != nil {
		return usageErrorf("%s: %v", limitExecCommand, err)
	}
	argv := fs.Args()
	if len(argv) < 2 {
		return usageErrorf("%s: want -- PATH ARGV0 [ARGS...]", limitExecCommand)
	}
	runtime.LockOSThread()
	if *fsize > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(*fsize), Max: uint64(*fsize)}); err != nil {
			return fmt.Errorf("set RLIMIT_FSIZE: %w", err)
		}
	}
	if *nproc > 0 {
		const rlimitNproc = 6 // RLIMIT_NPROC, not in package syscall
		if err := syscall.Setrlimit(rlimitNproc, &syscall.Rlimit{Cur: uint64(*nproc), Max: uint64(*nproc)}); err != nil {
			return fmt.Errorf("set RLIMIT_NPROC: %w", err)
		}
	}
	err := syscall.Exec(argv[0], argv[1:], os.Environ())
	return fmt.Errorf("exec %s: %w", argv[0], err)
}

// limited returns cmd run through limit-exec when launch.json asks for an
// rlimit; as it is, otherwise.
func (s *supervisor) limited(cmd *exec.Cmd) (*exec.Cmd, error) {
	l := s.launch.Limits
	if l == nil {
		return cmd, nil
	}
	nproc := 0
	if l.Pids > 0 && os.Geteuid() != 0 {
		// A backstop only (see limits.go): the watchdog counts exactly.
		procs, _ := scanProcs()
		nproc = l.Pids + userThreads(procs, os.Getuid())
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("limits: find own executable: %w", err)
	}
	argv := limitArgs(exe, l, nproc, cmd)
	if argv == nil {
		return cmd, nil
	}
	return &exec.Cmd{Path: exe, Args: argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin}, nil
}

// procInfo is one process as the watchdog sees it in /proc.
type procInfo struct {
	pid, ppid, pgid, uid int
	threads              int
	rss                  int64  // bytes
	start                string // procStart: with the pid, names the process
}

var pageSize = int64(os.Getpagesize())

// scanProcs reads every live process of the machine from /proc.
func scanProcs() ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]procInfo, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := statFields(e.Name())
		if err != nil || len(f) < 22 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		p := procInfo{pid: pid, uid: -1}
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgid, _ = strconv.Atoi(f[2])
		p.threads, _ = strconv.Atoi(f[17])
		p.start = f[19]
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		p.rss = rss * pageSize
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				p.uid = int(st.Uid)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// userThreads counts the threads of uid's processes.
func userThreads(procs []procInfo, uid int) int {
	n := 0
	for _, p := range procs {
		if p.uid == uid {
			n += p.threads
		}
	}
	return n
}

// attemptProcs picks the attempt's processes out of procs: the child
// (root, which leads its own group), its descendants and the members of
// its group.
func attemptProcs(procs []procInfo, root int) []procInfo {
	children := map[int][]int{}
	byPID := make(map[int]procInfo, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
		byPID[p.pid] = p
	}
	seen := map[int]bool{}
	var out []procInfo
	var visit func(pid int)
	visit = func(pid int) {
		p, ok := byPID[pid]
		if !ok || seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, p)
		for _, c := range children[pid] {
			visit(c)
		}
	}
	visit(root)
	for _, p := range procs {
		if p.pgid == root {
			visit(p.pid)
		}
	}
	return out
}

// watchLimits samples the processes of the running child p until it
// exits; when they pass the memory or pids limit, it stops the attempt
// and kills them all, and goes on killing what it finds until p exits.
func (s *supervisor) watchLimits(p *proc) {
	l := s.launch.Limits
	if !l.watched() {
		return
	}
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	killing := false
	for {
		procs, err := scanProcs()
		if err != nil {
			s.logger.Warn("limits: read /proc", logKeyErr, err)
		}
		mine := attemptProcs(procs, p.pgid)
		if !killing {
			var rss int64
			threads := 0
			for _, q := range mine {
				rss += q.rss
				threads += q.threads
			}
			switch {
			case l.MemoryBytes > 0 && rss > l.MemoryBytes:
				killing = s.limitStop(reasonOOM, fmt.Sprintf("killed: the task's processes used %s of memory (resident), over its limit of %s", sizeString(rss), sizeString(l.MemoryBytes)))
			case l.Pids > 0 && threads > l.Pids:
				killing = s.limitStop(reasonPids, fmt.Sprintf("killed: the task ran %d processes and threads, over its pids limit of %d", threads, l.Pids))
			}
		}
		if killing {
			syscall.Kill(-p.pgid, syscall.SIGKILL)
			for _, q := range mine {
				// Only the process the scan saw: its pid may have been
				// reused since.
				if start, err := procStart(q.pid); err != nil || start != q.start {
					continue
				}
				if err := syscall.Kill(q.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					s.logger.Warn("limits: kill", logKeyPID, q.pid, logKeyErr, err)
				}
			}
		}
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
	}
}
