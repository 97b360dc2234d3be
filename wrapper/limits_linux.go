package wrapper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"

	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// watchdogInterval is how often the watchdog samples an attempt's
// processes.
const watchdogInterval = 200 * time.Millisecond

// limitEnforcement is how this node enforces limits: with cgroups where
// the node user can write one, else rlimits and the watchdog.
func limitEnforcement() string { return ownCgroupPlan().enforcement() }

// cgroupFlags collects limit-exec's --cgroup flags.
type cgroupFlags []string

func (c *cgroupFlags) String() string { return strings.Join(*c, ",") }

func (c *cgroupFlags) Set(v string) error {
	*c = append(*c, v)
	return nil
}

// cmdLimitExec joins the cgroups and sets the rlimits its flags give and
// executes the program: it runs between the supervisor and the child, so
// that only the child and what it starts are bound.
func cmdLimitExec(args []string) error {
	fs := newFlagSet(limitExecCommand)
	fsize := fs.Int64("fsize", 0, "RLIMIT_FSIZE in bytes")
	nproc := fs.Int64("nproc", 0, "RLIMIT_NPROC")
	var cgroups cgroupFlags
	fs.Var(&cgroups, "cgroup", "a cgroup directory to join (repeated)")
	if err := fs.Parse(args); err != nil {
		return errkind.Usagef("%s: %v", limitExecCommand, err)
	}
	argv := fs.Args()
	if len(argv) < 2 {
		return errkind.Usagef("%s: want -- PATH ARGV0 [ARGS...]", limitExecCommand)
	}
	if err := joinCgroups(cgroups); err != nil {
		return err
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
// rlimit or the attempt has cgroups; as it is, otherwise.
func (s *supervisor) limited(cmd *exec.Cmd) (*exec.Cmd, error) {
	l := s.launch.Limits
	if l == nil {
		return cmd, nil
	}
	s.makeCgroup()
	nproc := 0
	if l.Pids > 0 && os.Geteuid() != 0 && !s.cg.has(ctrlPids) {
		// A backstop only (see limits.go): the watchdog counts exactly.
		procs, _ := scanProcs()
		nproc = l.Pids + userThreads(procs, os.Getuid())
	}
	s.nproc = nproc
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("limits: find own executable: %w", err)
	}
	var dirs []string
	if s.cg != nil {
		dirs = s.cg.dirs
	}
	argv := limitArgs(exe, l, nproc, dirs, cmd)
	if argv == nil {
		return cmd, nil
	}
	return &exec.Cmd{Path: exe, Args: argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin}, nil
}

// makeCgroup makes the attempt's cgroups, with its first limited child,
// where the node has usable ones; when that fails the watchdog enforces
// memory and pids, and wrapper.log says why.
func (s *supervisor) makeCgroup() {
	if s.cgTried {
		return
	}
	s.cgTried = true
	l := s.launch.Limits
	if l.CPU <= 0 && l.MemoryBytes <= 0 && l.Pids <= 0 {
		return // file_size only: an rlimit
	}
	p, err := cgroupsReady()
	if p == nil && err == nil && l.CPU > 0 {
		s.logger.Warn("limits: cpu is not enforced: no cgroup", taskfiles.LogKeyReason, ownCgroupPlan().why)
	}
	if err == nil && p != nil {
		stem := cgroupStem(s.launch.Project, s.launch.Task, s.dir)
		s.cg, err = newAttemptCgroup(p, stem, cgroupName(stem, s.launch.Attempt, os.Getpid()), s.launch.Limits, s.logger)
	}
	if err != nil {
		s.logger.Warn("limits: no cgroup; the watchdog enforces memory and pids, cpu is not enforced", taskfiles.LogKeyErr, err)
		return
	}
	if s.cg != nil {
		s.logger.Info("limits: cgroup", taskfiles.LogKeyPath, strings.Join(s.cg.dirs, " "))
	}
}

// procInfo is one process as the watchdog sees it in /proc.
type procInfo struct {
	pid, ppid, pgid, uid int
	threads              int
	rss                  int64  // bytes
	start                string // proc.ProcStart: with the pid, names the process
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
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// readProc reads one live process from /proc; false when it is gone or a
// zombie.
func readProc(pid int) (procInfo, bool) {
	name := strconv.Itoa(pid)
	f, err := proc.StatFields(name)
	if err != nil || len(f) < 22 || f[0] == "Z" || f[0] == "X" {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, uid: -1}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	p.threads, _ = strconv.Atoi(f[17])
	p.start = f[19]
	rss, _ := strconv.ParseInt(f[21], 10, 64)
	p.rss = rss * pageSize
	if fi, err := os.Stat("/proc/" + name); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			p.uid = int(st.Uid)
		}
	}
	return p, true
}

// treeProcs reads the live processes of the tree under root, walking
// /proc/<pid>/task/<tid>/children: it reads the attempt's processes only,
// not every process of the machine (a scan of 666 processes costs about
// 10 ms; the watchdog samples every 200 ms, for every limited attempt).
// ok is false when root is gone or the kernel has no children files
// (CONFIG_PROC_CHILDREN): then only a scan tells.
func treeProcs(root int) (out []procInfo, ok bool) {
	if !hasChildrenFiles() {
		return nil, false
	}
	queue := []int{root}
	seen := map[int]bool{}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		p, live := readProc(pid)
		if !live {
			if pid == root {
				return nil, false
			}
			continue
		}
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			continue // gone meanwhile
		}
		for _, tk := range tasks {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + tk.Name() + "/children") // a thread gone meanwhile has none
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					queue = append(queue, n)
				}
			}
		}
		out = append(out, p)
	}
	return out, true
}

// hasChildrenFiles reports whether the kernel offers
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN).
var hasChildrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d/children", syscall.Gettid()))
	return err == nil
})

// fullScanEvery is how many samples of the watchdog walk only the
// attempt's tree between two scans of every process; a scan also finds
// the members of the attempt's group that left its tree (a double fork),
// which the samples between scans then read by pid.
const fullScanEvery = 10

// sampleAttempt returns the attempt's processes (see attemptProcs): by a
// scan of every process when full, else by walking its tree and reading
// the outsiders the last scan found (those still alive as they were).
// outsiders is updated by a scan.
func sampleAttempt(root int, full bool, outsiders *[]procInfo) ([]procInfo, error) {
	if !full {
		if tree, ok := treeProcs(root); ok {
			in := make(map[int]bool, len(tree))
			for _, p := range tree {
				in[p.pid] = true
			}
			for _, o := range *outsiders {
				if in[o.pid] {
					continue
				}
				if p, live := readProc(o.pid); live && p.start == o.start {
					tree = append(tree, p)
				}
			}
			return tree, nil
		}
	}
	procs, err := scanProcs()
	mine := attemptProcs(procs, root)
	tree, _ := treeProcs(root)
	in := make(map[int]bool, len(tree))
	for _, p := range tree {
		in[p.pid] = true
	}
	*outsiders = (*outsiders)[:0]
	for _, p := range mine {
		if !in[p.pid] {
			*outsiders = append(*outsiders, p)
		}
	}
	return mine, err
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

// watchLimits watches the running child p until it exits: it reads the
// attempt's cgroups' counters (an OOM kill, a refused fork) and samples
// the processes for the limits no cgroup enforces. Past a limit, it stops
// the attempt and kills its processes, and goes on killing what it finds
// until p exits.
func (s *supervisor) watchLimits(p *proc.Proc) {
	l := s.launch.Limits
	if !limitsWatched(l) {
		return
	}
	cg := s.cg
	sampleMem := l.MemoryBytes > 0 && !cg.has(ctrlMemory)
	samplePids := l.Pids > 0 && !cg.has(ctrlPids)
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	killing := false
	var outsiders []procInfo
	for i := 0; ; i++ {
		var mine []procInfo
		if sampleMem || samplePids || (killing && cg == nil) {
			var err error
			mine, err = sampleAttempt(p.Pgid, i%fullScanEvery == 0 || killing, &outsiders)
			if err != nil {
				s.logger.Warn("limits: read /proc", taskfiles.LogKeyErr, err)
			}
		}
		if !killing {
			var rss int64
			threads := 0
			for _, q := range mine {
				rss += q.rss
				threads += q.threads
			}
			switch {
			case l.MemoryBytes > 0 && cg.has(ctrlMemory) && cg.oomKills() > 0:
				killing = s.limitStop(reasonOOM, oomMessage(l))
			case l.Pids > 0 && cg.has(ctrlPids) && cg.pidsRefused() > 0:
				killing = s.limitStop(reasonPids, pidsMessage(l))
			case sampleMem && rss > l.MemoryBytes:
				killing = s.limitStop(reasonOOM, fmt.Sprintf("killed: the task's processes used %s of memory (resident), over its limit of %s", sizeString(rss), sizeString(l.MemoryBytes)))
			case samplePids && threads > l.Pids:
				killing = s.limitStop(reasonPids, fmt.Sprintf("killed: the task ran %d processes and threads, over its pids limit of %d", threads, l.Pids))
			}
		}
		if killing {
			cg.kill()
			syscall.Kill(-p.Pgid, syscall.SIGKILL)
			for _, q := range mine {
				// Only the process the scan saw: its pid may have been
				// reused since.
				if start, err := proc.ProcStart(q.pid); err != nil || start != q.start {
					continue
				}
				if err := syscall.Kill(q.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					s.logger.Warn("limits: kill", taskfiles.LogKeyPID, q.pid, taskfiles.LogKeyErr, err)
				}
			}
		}
		select {
		case <-p.Exited:
			return
		case <-t.C:
		}
	}
}

// termSandboxed asks a sandboxed child to end: SIGTERM to every process
// under root (the bwrap the supervisor started) but bwrap's own. bwrap
// passes no signal on (a SIGTERM to it ends the sandbox at once, its
// pid namespace's init taking every process with it), so the tool would
// get no grace; this way it gets the same as unconfined, and the
// SIGKILL after the grace still goes to bwrap's group. A process of the
// task that calls itself bwrap gets no SIGTERM, only the SIGKILL.
func termSandboxed(root int) {
	procs, ok := treeProcs(root)
	if !ok {
		all, err := scanProcs()
		if err != nil {
			syscall.Kill(-root, syscall.SIGTERM)
			return
		}
		procs = attemptProcs(all, root)
	}
	for _, p := range procs {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/comm")
		if p.pid == root || strings.TrimSpace(string(comm)) == "bwrap" {
			continue
		}
		syscall.Kill(p.pid, syscall.SIGTERM)
	}
}
