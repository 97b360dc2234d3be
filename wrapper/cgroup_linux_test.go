//go:build linux

package wrapper

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// requireCgroups skips the test where the test's user cannot write a
// cgroup (non-root without a delegated subtree); on cgroup v2 it first
// moves the test into the wrapper's leaf, as a supervisor does, so that
// the wrappers it starts use the same cgroups. It returns the plan.
func requireCgroups(t *testing.T) *limits.CgroupPlan {
	t.Helper()
	if os.Getenv(limits.EnvCgroups) == "off" {
		t.Skipf("%s=off", limits.EnvCgroups)
	}
	p, err := limits.CgroupsReady()
	if err != nil {
		t.Skipf("cgroups here, but not usable by this test: %v (on cgroup v2 the test's cgroup must hold only the test)", err)
	}
	if p == nil {
		t.Skipf("no cgroup this user can write here (%s): the cgroup tests need root or a delegated cgroup v2 subtree", limits.OwnCgroupPlan().Why)
	}
	return p
}

// taskCgroups lists the cgroups of the test node's task id in the plan's
// hierarchies.
func taskCgroups(t *testing.T, p *limits.CgroupPlan, n *sandboxNode, id string) []string {
	t.Helper()
	var out []string
	for _, h := range p.Hiers {
		m, err := filepath.Glob(filepath.Join(h.Base, limits.CgroupStem("demo", id, n.taskDir(id))+"*"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// requireController skips the test where the plan lacks controller c.
func requireController(t *testing.T, p *limits.CgroupPlan, c string) {
	t.Helper()
	if !p.Has(c) {
		t.Skipf("no %s controller in the writable cgroups (%s)", c, p.Enforcement())
	}
}

// TestCgroupCPUQuota: a busy loop under cpu: 0.2 gets a fifth of a core:
// the cgroup throttles it, and its CPU time over its run is at most 0.3
// of the wall time (a ratio: no wall-clock bound on the test).
func TestCgroupCPUQuota(t *testing.T) {
	p := requireCgroups(t)
	requireController(t, p, limits.CtrlCPU)
	n := newLimitsNode(t, "", false)
	// The shell's children's CPU time (cutime, cstime: fields 16 and 17 of
	// /proc/<pid>/stat) counts the loop once timeout has reaped it.
	script := `s=$(date +%s%N); timeout 3 sh -c 'while :; do :; done'; e=$(date +%s%N); echo "$s $e" > wall; cat /proc/$$/stat > stat; touch looped; while [ ! -e go ]; do sleep 0.05; done`
	n.launch(t, n.item("CPU", wire.Launch{Command: shell(script), Limits: &wire.Limits{CPU: 0.2}}))
	out := filepath.Join(n.taskDir("CPU"), taskfiles.DirOutput)
	wtest.Poll(t, 20*time.Second, "the busy loop to end", func() bool {
		_, err := os.Stat(filepath.Join(out, "looped"))
		return err == nil
	})
	dirs := taskCgroups(t, p, n, "CPU")
	if len(dirs) != 1 {
		t.Fatalf("the task's cgroups: %v, want one (cpu)", dirs)
	}
	stat, err := os.ReadFile(filepath.Join(dirs[0], "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if throttled := limits.ParseKeyed(string(stat), "nr_throttled"); throttled <= 0 {
		t.Errorf("the cgroup never throttled the loop: %s", stat)
	}
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := n.final(t, "CPU"); st.Status != wire.StatusCompleted {
		t.Fatalf("the busy loop: %+v, want completed", st)
	}
	wall, _ := os.ReadFile(filepath.Join(out, "wall"))
	procStat, _ := os.ReadFile(filepath.Join(out, "stat"))
	w := strings.Fields(string(wall))
	f := strings.Fields(string(procStat))
	if len(w) != 2 || len(f) < 17 {
		t.Fatalf("wall %q, stat %q", wall, procStat)
	}
	s, _ := strconv.ParseInt(w[0], 10, 64)
	e, _ := strconv.ParseInt(w[1], 10, 64)
	cu, _ := strconv.ParseInt(f[15], 10, 64)
	cs, _ := strconv.ParseInt(f[16], 10, 64)
	const ticks = 100 // USER_HZ
	cpu := float64(cu+cs) / ticks
	secs := float64(e-s) / 1e9
	cores := cpu / secs
	t.Logf("the loop under cpu: 0.2 used %.2f s of CPU in %.2f s: %.3f cores", cpu, secs, cores)
	if secs < 2 || cores > 0.3 {
		t.Errorf("the loop used %.3f cores over %.2f s, want at most 0.3", cores, secs)
	}
	if left := taskCgroups(t, p, n, "CPU"); len(left) != 0 {
		t.Errorf("cgroups left after the attempt: %v", left)
	}
}

// TestCgroupMemoryOOM: a task over its memory limit is killed by the
// cgroup's OOM killer and fails as oom; no cgroup is left.
func TestCgroupMemoryOOM(t *testing.T) {
	p := requireCgroups(t)
	requireController(t, p, limits.CtrlMemory)
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			n := newLimitsNode(t, "", sandboxed)
			st, _, _ := limitsRun(t, n, &wire.Limits{MemoryBytes: 64 << 20}, hog)
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassOOM || !strings.Contains(st.Error, "OOM killer") {
				t.Errorf("the hog: %+v, want failed with class oom by the cgroup's OOM killer", st)
			}
			if left := taskCgroups(t, p, n, "LIMITED"); len(left) != 0 {
				t.Errorf("cgroups left after the attempt: %v", left)
			}
		})
	}
}

// TestCgroupPidsForkBomb: the pids cgroup refuses the fork bomb's forks
// past the limit and the attempt fails as pids; nothing is left.
func TestCgroupPidsForkBomb(t *testing.T) {
	p := requireCgroups(t)
	requireController(t, p, limits.CtrlPids)
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			n := newLimitsNode(t, "", sandboxed)
			st, _, _ := limitsRun(t, n, &wire.Limits{Pids: 64}, forkBomb)
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassPids || !strings.Contains(st.Error, "the cgroup refused the fork") {
				t.Errorf("the fork bomb: %+v, want failed with class pids by the cgroup", st)
			}
			if _, err := os.Stat(filepath.Join(n.taskDir("LIMITED"), taskfiles.DirOutput, "started")); err == nil {
				t.Error("the fork bomb started all its 2000 processes")
			}
			wtest.Poll(t, 5*time.Second, "no sleeper of the fork bomb left", func() bool { return sleepersLeft() == 0 })
			if left := taskCgroups(t, p, n, "LIMITED"); len(left) != 0 {
				t.Errorf("cgroups left after the attempt: %v", left)
			}
		})
	}
}

// TestCgroupWatchdogFallback: with cgroups off the watchdog enforces
// memory and pids as before (its own messages), on a node that has
// cgroups, and wrapper.log says that cpu is not enforced.
func TestCgroupWatchdogFallback(t *testing.T) {
	p := requireCgroups(t)
	n := newLimitsNode(t, "", false)
	n.env = append(n.env, limits.EnvCgroups+"=off")
	st, _, _ := limitsRun(t, n, &wire.Limits{MemoryBytes: 64 << 20, CPU: 0.5}, hog)
	if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassOOM || !strings.Contains(st.Error, "(resident)") {
		t.Errorf("the hog with cgroups off: %+v, want failed with class oom by the watchdog", st)
	}
	if made := taskCgroups(t, p, n, "LIMITED"); len(made) != 0 {
		t.Errorf("cgroups made with cgroups off: %v", made)
	}
	if log, _ := os.ReadFile(filepath.Join(n.taskDir("LIMITED"), taskfiles.FileWrapper)); !strings.Contains(string(log), "cpu is not enforced") {
		t.Errorf("wrapper.log does not say that cpu is not enforced:\n%s", log)
	}
	// As root, no RLIMIT_NPROC: the watchdog alone stops the fork bomb.
	n = newLimitsNode(t, "", false)
	n.env = append(n.env, limits.EnvCgroups+"=off")
	st, _, _ = limitsRun(t, n, &wire.Limits{Pids: 64}, forkBomb)
	if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassPids || !strings.Contains(st.Error, "processes and threads, over its pids limit of 64") {
		t.Errorf("the fork bomb with cgroups off: %+v, want failed with class pids by the watchdog", st)
	}
	wtest.Poll(t, 5*time.Second, "no sleeper of the fork bomb left", func() bool { return sleepersLeft() == 0 })
}

// TestCgroupStaleRemoved: a cgroup a crashed supervisor of the task left
// (with a process still in it) is removed by the task's next attempt.
func TestCgroupStaleRemoved(t *testing.T) {
	p := requireCgroups(t)
	requireController(t, p, limits.CtrlMemory)
	n := newLimitsNode(t, "", false)
	var base string
	for _, h := range p.Hiers {
		if slices.Contains(h.Controllers, limits.CtrlMemory) {
			base = h.Base
		}
	}
	stale := filepath.Join(base, limits.CgroupName(limits.CgroupStem("demo", "LIMITED", n.taskDir("LIMITED")), 1, 999999))
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { limits.RemoveCgroupDir(stale, 0) })
	// A sleeper in the stale cgroup, as a crashed supervisor's tool would be.
	sleeper := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}}
	pid, err := syscall.ForkExec("/bin/sh", []string{"/bin/sh", "-c", "echo $$ > " + filepath.Join(stale, "cgroup.procs") + " && exec sleep 60"}, sleeper)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); syscall.Wait4(pid, nil, 0, nil) })
	wtest.Poll(t, 5*time.Second, "the sleeper in the stale cgroup", func() bool {
		b, _ := os.ReadFile(filepath.Join(stale, "cgroup.procs"))
		return strings.TrimSpace(string(b)) == strconv.Itoa(pid)
	})
	st, _, _ := limitsRun(t, n, &wire.Limits{MemoryBytes: 1 << 30}, `echo ok`)
	if st.Status != wire.StatusCompleted {
		t.Errorf("the next attempt: %+v, want completed", st)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the stale cgroup %s is still there", stale)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the sleeper in the stale cgroup: %v, %v; want killed", ws, err)
	}
	if left := taskCgroups(t, p, n, "LIMITED"); len(left) != 0 {
		t.Errorf("cgroups left after the attempt: %v", left)
	}
}
