package limits

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// watchdogInterval is how often the watchdog samples an attempt's
// processes.
const watchdogInterval = 200 * time.Millisecond

// LimitEnforcement is how this node enforces limits: with cgroups where
// the node user can write one, else rlimits and the watchdog.
func LimitEnforcement() string { return OwnCgroupPlan().Enforcement() }

// cgroupFlags collects limit-exec's --cgroup flags.
type cgroupFlags []string

func (c *cgroupFlags) String() string { return strings.Join(*c, ",") }

func (c *cgroupFlags) Set(v string) error {
	*c = append(*c, v)
	return nil
}

// CmdLimitExec joins the cgroups and sets the rlimits its flags give and
// executes the program: it runs between the supervisor and the child, so
// that only the child and what it starts are bound.
func CmdLimitExec(args []string) error {
	fs := flag.NewFlagSet(LimitExecCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fsize := fs.Int64("fsize", 0, "RLIMIT_FSIZE in bytes")
	nproc := fs.Int64("nproc", 0, "RLIMIT_NPROC")
	var cgroups cgroupFlags
	fs.Var(&cgroups, "cgroup", "a cgroup directory to join (repeated)")
	if err := fs.Parse(args); err != nil {
		return errkind.Usagef("%s: %v", LimitExecCommand, err)
	}
	argv := fs.Args()
	if len(argv) < 2 {
		return errkind.Usagef("%s: want -- PATH ARGV0 [ARGS...]", LimitExecCommand)
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

// ProcInfo is one process as the watchdog sees it in /proc.
type ProcInfo struct {
	Pid, Ppid, pgid, uid int
	threads              int
	rss                  int64  // bytes
	start                string // proc.ProcStart: with the pid, names the process
}

var pageSize = int64(os.Getpagesize())

// ScanProcs reads every live process of the machine from /proc.
func ScanProcs() ([]ProcInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]ProcInfo, 0, len(entries))
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
func readProc(pid int) (ProcInfo, bool) {
	name := strconv.Itoa(pid)
	f, err := proc.StatFields(name)
	if err != nil || len(f) < 22 || f[0] == "Z" || f[0] == "X" {
		return ProcInfo{}, false
	}
	p := ProcInfo{Pid: pid, uid: -1}
	p.Ppid, _ = strconv.Atoi(f[1])
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

// TreeProcs reads the live processes of the tree under root, walking
// /proc/<pid>/task/<tid>/children: it reads the attempt's processes only,
// not every process of the machine (a scan of 666 processes costs about
// 10 ms; the watchdog samples every 200 ms, for every limited attempt).
// ok is false when root is gone or the kernel has no children files
// (CONFIG_PROC_CHILDREN): then only a scan tells.
func TreeProcs(root int) (out []ProcInfo, ok bool) {
	if !HasChildrenFiles() {
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

// HasChildrenFiles reports whether the kernel offers
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN).
var HasChildrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d/children", syscall.Gettid()))
	return err == nil
})

// fullScanEvery is how many samples of the watchdog walk only the
// attempt's tree between two scans of every process; a scan also finds
// the members of the attempt's group that left its tree (a double fork),
// which the samples between scans then read by pid.
const fullScanEvery = 10

// SampleAttempt returns the attempt's processes (see AttemptProcs): by a
// scan of every process when full, else by walking its tree and reading
// the outsiders the last scan found (those still alive as they were).
// outsiders is updated by a scan.
func SampleAttempt(root int, full bool, outsiders *[]ProcInfo) ([]ProcInfo, error) {
	if !full {
		if tree, ok := TreeProcs(root); ok {
			in := make(map[int]bool, len(tree))
			for _, p := range tree {
				in[p.Pid] = true
			}
			for _, o := range *outsiders {
				if in[o.Pid] {
					continue
				}
				if p, live := readProc(o.Pid); live && p.start == o.start {
					tree = append(tree, p)
				}
			}
			return tree, nil
		}
	}
	procs, err := ScanProcs()
	mine := AttemptProcs(procs, root)
	tree, _ := TreeProcs(root)
	in := make(map[int]bool, len(tree))
	for _, p := range tree {
		in[p.Pid] = true
	}
	*outsiders = (*outsiders)[:0]
	for _, p := range mine {
		if !in[p.Pid] {
			*outsiders = append(*outsiders, p)
		}
	}
	return mine, err
}

// UserThreads counts the threads of uid's processes.
func UserThreads(procs []ProcInfo, uid int) int {
	n := 0
	for _, p := range procs {
		if p.uid == uid {
			n += p.threads
		}
	}
	return n
}

// AttemptProcs picks the attempt's processes out of procs: the child
// (root, which leads its own group), its descendants and the members of
// its group.
func AttemptProcs(procs []ProcInfo, root int) []ProcInfo {
	children := map[int][]int{}
	byPID := make(map[int]ProcInfo, len(procs))
	for _, p := range procs {
		children[p.Ppid] = append(children[p.Ppid], p.Pid)
		byPID[p.Pid] = p
	}
	seen := map[int]bool{}
	var out []ProcInfo
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
			visit(p.Pid)
		}
	}
	return out
}

// Watchdog is watchLimits' loop: stop is called once past a limit, with
// the reason and the message, and says whether the attempt is now stopping.
func Watchdog(l *wire.Limits, cg *AttemptCgroup, p *proc.Proc, stop func(reason, msg string) bool, logger *slog.Logger) {
	if !limitsWatched(l) {
		return
	}
	sampleMem := l.MemoryBytes > 0 && !cg.Has(CtrlMemory)
	samplePids := l.Pids > 0 && !cg.Has(CtrlPids)
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	killing := false
	var outsiders []ProcInfo
	for i := 0; ; i++ {
		var mine []ProcInfo
		if sampleMem || samplePids || (killing && cg == nil) {
			var err error
			mine, err = SampleAttempt(p.Pgid, i%fullScanEvery == 0 || killing, &outsiders)
			if err != nil {
				logger.Warn("limits: read /proc", taskfiles.LogKeyErr, err)
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
			case l.MemoryBytes > 0 && cg.Has(CtrlMemory) && cg.OomKills() > 0:
				killing = stop(ReasonOOM, OomMessage(l))
			case l.Pids > 0 && cg.Has(CtrlPids) && cg.PidsRefused() > 0:
				killing = stop(ReasonPids, PidsMessage(l))
			case sampleMem && rss > l.MemoryBytes:
				killing = stop(ReasonOOM, fmt.Sprintf("killed: the task's processes used %s of memory (resident), over its limit of %s", sizeString(rss), sizeString(l.MemoryBytes)))
			case samplePids && threads > l.Pids:
				killing = stop(ReasonPids, fmt.Sprintf("killed: the task ran %d processes and threads, over its pids limit of %d", threads, l.Pids))
			}
		}
		if killing {
			cg.kill()
			syscall.Kill(-p.Pgid, syscall.SIGKILL)
			for _, q := range mine {
				// Only the process the scan saw: its pid may have been
				// reused since.
				if start, err := proc.ProcStart(q.Pid); err != nil || start != q.start {
					continue
				}
				if err := syscall.Kill(q.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					logger.Warn("limits: kill", taskfiles.LogKeyPID, q.Pid, taskfiles.LogKeyErr, err)
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

// TermSandboxed asks a sandboxed child to end: SIGTERM to every process
// under root (the bwrap the supervisor started) but bwrap's own. bwrap
// passes no signal on (a SIGTERM to it ends the sandbox at once, its
// pid namespace's init taking every process with it), so the tool would
// get no grace; this way it gets the same as unconfined, and the
// SIGKILL after the grace still goes to bwrap's group. A process of the
// task that calls itself bwrap gets no SIGTERM, only the SIGKILL.
func TermSandboxed(root int) {
	procs, ok := TreeProcs(root)
	if !ok {
		all, err := ScanProcs()
		if err != nil {
			syscall.Kill(-root, syscall.SIGTERM)
			return
		}
		procs = AttemptProcs(all, root)
	}
	for _, p := range procs {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/comm")
		if p.Pid == root || strings.TrimSpace(string(comm)) == "bwrap" {
			continue
		}
		syscall.Kill(p.Pid, syscall.SIGTERM)
	}
}
