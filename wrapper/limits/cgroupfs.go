package limits

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// EnvCgroups, set to "off" in the wrapper's environment, keeps it from
// using cgroups: the watchdog enforces the limits it can, as on a node
// without a writable cgroup.
const EnvCgroups = "DISPATCH_WRAPPER_CGROUPS"

// OwnCgroupPlan is how this process puts attempts in cgroups, decided once
// from /proc/self.
var OwnCgroupPlan = sync.OnceValue(func() *CgroupPlan {
	if os.Getenv(EnvCgroups) == "off" {
		return &CgroupPlan{Why: EnvCgroups + "=off"}
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return &CgroupPlan{Why: err.Error()}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return &CgroupPlan{Why: err.Error()}
	}
	p := planCgroups(parseProcCgroup(string(own)), parseMountinfo(string(mi)), readCgroupDir)
	return &p
})

// readCgroupDir tells planCgroups what it needs of a cgroup directory.
func readCgroupDir(dir string, v2 bool) cgroupDirInfo {
	const wOK = 2 // W_OK
	var info cgroupDirInfo
	info.writable = syscall.Access(dir, wOK) == nil && syscall.Access(filepath.Join(dir, "cgroup.procs"), wOK) == nil
	if !v2 {
		return info
	}
	info.writable = info.writable && syscall.Access(filepath.Join(dir, "cgroup.subtree_control"), wOK) == nil
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	info.controllers = strings.Fields(string(b))
	b, _ = os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	info.subtree = strings.Fields(string(b))
	_, err := os.Stat(filepath.Join(dir, "cgroup.type"))
	info.root = errors.Is(err, os.ErrNotExist)
	return info
}

// CgroupsReady returns the plan once the v2 leaf is made and the
// controllers enabled (nil, error when that fails: the watchdog then
// enforces what it can); nil, nil where no cgroup is usable. Only the
// supervisor calls it: it moves the calling process.
var CgroupsReady = sync.OnceValues(func() (*CgroupPlan, error) {
	p := OwnCgroupPlan()
	if p.version == 0 {
		return nil, nil
	}
	if p.version == 1 {
		return p, nil
	}
	h := &p.Hiers[0]
	if p.leaf != "" {
		if err := os.Mkdir(p.leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup v2: make the wrapper's leaf: %w", err)
		}
		if err := writeCgroupFile(filepath.Join(p.leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return nil, fmt.Errorf("cgroup v2: move the supervisor into %s: %w", p.leaf, err)
		}
	}
	var enabled []string
	var firstErr error
	for _, c := range h.Controllers {
		err := writeCgroupFile(filepath.Join(h.Base, "cgroup.subtree_control"), "+"+c)
		if err == nil {
			enabled = append(enabled, c)
		} else if firstErr == nil {
			firstErr = err
		}
	}
	if len(enabled) == 0 {
		return nil, fmt.Errorf("cgroup v2: enable %s in %s (another process in it?): %w", strings.Join(h.Controllers, ","), h.Base, firstErr)
	}
	h.Controllers = enabled
	return p, nil
})

// writeCgroupFile writes value into a cgroup file (no truncation, no
// temporary file: cgroupfs takes one write).
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// AttemptCgroup is one attempt's cgroups: one directory per hierarchy of
// the plan that has a limit to enforce.
type AttemptCgroup struct {
	version int
	Dirs    []string
	ctrls   [][]string // the controllers enforced in dirs[i]
}

// NewAttemptCgroup makes the cgroups named name for limits l, having
// removed the task's stale ones (stem: see CgroupStem). nil, nil when the
// plan has no controller for l.
func NewAttemptCgroup(p *CgroupPlan, stem, name string, l *wire.Limits, logger *slog.Logger) (*AttemptCgroup, error) {
	c := &AttemptCgroup{version: p.version}
	for _, h := range p.Hiers {
		dir := filepath.Join(h.Base, name)
		files := cgroupFiles(p.version, h.Controllers, l, func(f string) bool {
			_, err := os.Stat(filepath.Join(h.Base, f))
			return err == nil
		})
		if len(files) == 0 {
			continue
		}
		removeStaleCgroups(h.Base, stem, logger)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.Remove()
			return nil, fmt.Errorf("make cgroup: %w", err)
		}
		c.Dirs = append(c.Dirs, dir)
		c.ctrls = append(c.ctrls, h.Controllers)
		for _, f := range files {
			if err := writeCgroupFile(filepath.Join(dir, f.name), f.value); err != nil {
				c.Remove()
				return nil, fmt.Errorf("cgroup: write %s %s: %w", f.value, filepath.Join(dir, f.name), err)
			}
		}
	}
	if len(c.Dirs) == 0 {
		return nil, nil
	}
	return c, nil
}

// removeStaleCgroups removes the cgroups of base a crashed supervisor of
// the task left (their names start with stem), killing what runs in them:
// the task's lock is held, nothing of it may be running.
func removeStaleCgroups(base, stem string, logger *slog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), stem) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if err := RemoveCgroupDir(dir, 0); err != nil {
			logger.Warn("remove the cgroup of an earlier attempt", taskfiles.LogKeyPath, dir, taskfiles.LogKeyErr, err)
			continue
		}
		logger.Warn("removed the cgroup of an earlier attempt", taskfiles.LogKeyPath, dir)
	}
}

// Has reports whether the attempt's cgroups enforce controller ctrl.
func (c *AttemptCgroup) Has(ctrl string) bool {
	return c.dir(ctrl) != ""
}

// dir is the attempt's cgroup of controller ctrl ("": none).
func (c *AttemptCgroup) dir(ctrl string) string {
	if c == nil {
		return ""
	}
	for i, cs := range c.ctrls {
		for _, x := range cs {
			if x == ctrl {
				return c.Dirs[i]
			}
		}
	}
	return ""
}

// OomKills counts the processes the kernel's OOM killer killed in the
// attempt's memory cgroup (-1: the kernel does not say).
func (c *AttemptCgroup) OomKills() int64 {
	dir := c.dir(CtrlMemory)
	if dir == "" {
		return 0
	}
	file := "memory.events"
	if c.version == 1 {
		file = "memory.oom_control" // oom_kill since Linux 4.13
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return -1
	}
	return ParseKeyed(string(b), "oom_kill")
}

// MemoryFailures counts, on v1, the times the memory cgroup hit its limit
// (memory.failcnt): for a kernel whose oom_control has no oom_kill.
func (c *AttemptCgroup) MemoryFailures() int64 {
	dir := c.dir(CtrlMemory)
	if dir == "" || c.version != 1 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "memory.failcnt"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// PidsRefused counts the forks the attempt's pids cgroup refused.
func (c *AttemptCgroup) PidsRefused() int64 {
	dir := c.dir(CtrlPids)
	if dir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		return 0
	}
	return max(ParseKeyed(string(b), "max"), 0)
}

// kill sends SIGKILL to every process of the attempt's cgroups.
func (c *AttemptCgroup) kill() {
	if c == nil {
		return
	}
	for _, d := range c.Dirs {
		killCgroup(d, 0)
	}
}

// maxCgroupDepth bounds how deep the cgroups a task made inside its own
// are followed.
const maxCgroupDepth = 8

// killCgroup sends SIGKILL to the processes of dir and of the cgroups
// the task made in it (cgroup.kill where the kernel has it). Membership
// is the proof a pid is the attempt's: no other check is needed.
func killCgroup(dir string, depth int) {
	if writeCgroupFile(filepath.Join(dir, "cgroup.kill"), "1") == nil {
		return
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if depth >= maxCgroupDepth {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			killCgroup(filepath.Join(dir, e.Name()), depth+1)
		}
	}
}

// cgroupEmptyWait bounds how long remove waits for killed processes to
// leave their cgroup.
const cgroupEmptyWait = 2 * time.Second

// Remove kills what is left in the attempt's cgroups and removes them.
func (c *AttemptCgroup) Remove() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, d := range c.Dirs {
		errs = append(errs, RemoveCgroupDir(d, 0))
	}
	return errors.Join(errs...)
}

// RemoveCgroupDir kills the processes of dir and its children, waits for
// them to leave and removes the directories, deepest first.
func RemoveCgroupDir(dir string, depth int) error {
	if depth == 0 {
		killCgroup(dir, 0)
	}
	if depth < maxCgroupDepth {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				RemoveCgroupDir(filepath.Join(dir, e.Name()), depth+1)
			}
		}
	}
	deadline := time.Now().Add(cgroupEmptyWait)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		killCgroup(dir, depth)
		time.Sleep(20 * time.Millisecond)
	}
}

// joinCgroups moves the calling process into the cgroups dirs.
func joinCgroups(dirs []string) error {
	pid := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		if err := writeCgroupFile(filepath.Join(d, "cgroup.procs"), pid); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}
