//go:build linux

package wrapper

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
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
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// limitsRun runs a limited task and an unlimited neighbour in one launch
// on a node in a fresh directory, as the node user cred (nil: the
// test's), sandboxed when mode is "bwrap"; it returns both final statuses
// and how long the limited one took.
func limitsRun(t *testing.T, n *sandboxNode, limits *wire.Limits, script string) (st, nb *wire.Status, took time.Duration) {
	t.Helper()
	begun := time.Now()
	n.launch(t, n.item("LIMITED", wire.Launch{Command: shell(script), Sandbox: n.mode, Limits: limits}),
		n.item("NEIGHBOUR", wire.Launch{Command: shell(`echo neighbour-data > data; sleep 2; cat data`), Sandbox: n.mode}))
	st = n.final(t, "LIMITED")
	took = time.Since(begun)
	nb = n.final(t, "NEIGHBOUR")
	if nb.Status != wire.StatusCompleted {
		t.Errorf("the neighbour: %+v, want completed", nb)
	}
	return st, nb, took
}

// newLimitsNode is a node for the limits tests: unsandboxed, or with the
// sandbox when sandboxed (and bwrap works).
func newLimitsNode(t *testing.T, asUser string, sandboxed bool) *sandboxNode {
	t.Helper()
	n := newSandboxNode(t, asUser)
	if !sandboxed {
		n.mode = ""
	}
	return n
}

// hog is a shell holding about 400 MB in a variable, then waiting: its
// growth is bounded, and it outlives the watchdog's next sample.
const hog = `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo grown; sleep 20`

func TestLimitsMemoryKillsTaskAsOOM(t *testing.T) {
	t.Parallel()
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			n := newLimitsNode(t, "", sandboxed)
			st, _, took := limitsRun(t, n, &wire.Limits{MemoryBytes: 64 << 20}, hog)
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassOOM || !strings.Contains(st.Error, "over its limit of 64.0 MiB") {
				t.Errorf("the hog: %+v, want failed with class oom", st)
			}
			if took > 15*time.Second {
				t.Errorf("the hog took %v to be stopped", took)
			}
		})
	}
}

// TestLimitsMemoryUnderLimitCompletes: the watchdog leaves a task under
// its limit alone.
func TestLimitsMemoryUnderLimitCompletes(t *testing.T) {
	t.Parallel()
	n := newLimitsNode(t, "", false)
	st, _, _ := limitsRun(t, n, &wire.Limits{MemoryBytes: 1 << 30, Pids: 64}, `x=$(head -c 1000000 /dev/zero | tr '\0' a); sleep 0.5; echo ok`)
	if st.Status != wire.StatusCompleted {
		t.Errorf("a task under its limits: %+v, want completed", st)
	}
}

// forkBomb starts up to 2000 sleepers, bounded: marked by their odd
// duration, so that a stray one can be found.
const forkBomb = `i=0; while [ $i -lt 2000 ]; do sleep 29.731 & i=$((i+1)); done; echo all-started > started; wait`

// sleepersLeft counts the processes running the fork bomb's sleep.
func sleepersLeft() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(data, []byte("29.731")) {
			if f, err := proc.StatFields(e.Name()); err == nil && f[0] != "Z" {
				n++
			}
		}
	}
	return n
}

// TestLimitsPidsStopsForkBomb runs the bomb as the test's user and, as
// root, also as the user bwtest, sandboxed and not: as root the pids
// cgroup or the watchdog stops it (RLIMIT_NPROC does not bind root); as
// any other user, without a cgroup of its own, RLIMIT_NPROC refuses its
// forks first, and the attempt is still classed pids (issue 39: it was
// exit, and retried).
func TestLimitsPidsStopsForkBomb(t *testing.T) {
	users := []string{""}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("bwtest"); err != nil {
			t.Fatalf("as root this test also runs its node as the user bwtest: %v; fix: useradd -m bwtest", err)
		}
		users = append(users, "bwtest")
	}
	for _, u := range users {
		for _, sandboxed := range []bool{false, true} {
			t.Run("user="+u+",sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
				n := newLimitsNode(t, u, sandboxed)
				st, _, _ := limitsRun(t, n, &wire.Limits{Pids: 64}, forkBomb)
				if st.Status == wire.StatusCompleted {
					t.Errorf("the fork bomb completed: %+v", st)
				}
				if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassPids || !strings.Contains(st.Error, "pids limit of 64") {
					log, _ := os.ReadFile(filepath.Join(n.taskDir("LIMITED"), taskfiles.FileLog))
					t.Errorf("the fork bomb as uid %d: %+v, log %q; want failed with class pids", nodeUID(n), st, log)
				}
				if _, err := os.Stat(filepath.Join(n.taskDir("LIMITED"), taskfiles.DirOutput, "started")); err == nil {
					t.Error("the fork bomb started all its 2000 processes")
				}
				t.Logf("the fork bomb: %s: %s", st.ErrorClass, st.Error)
				wtest.Poll(t, 5*time.Second, "no sleeper of the fork bomb left", func() bool { return sleepersLeft() == 0 })
			})
		}
	}
}

// TestLimitsPidsInSetup: a setup that forks past its pids limit fails the
// attempt as the tool would, class pids, for any node user (not as
// `start`, the class of a setup that failed on its own).
func TestLimitsPidsInSetup(t *testing.T) {
	users := []string{""}
	if os.Geteuid() == 0 {
		users = append(users, "bwtest")
	}
	for _, u := range users {
		t.Run("user="+u, func(t *testing.T) {
			n := newLimitsNode(t, u, false)
			n.launch(t, n.item("LIMITED", wire.Launch{Setup: forkBomb, Command: shell("echo tool-ran > ran"), Limits: &wire.Limits{Pids: 64}}))
			st := n.final(t, "LIMITED")
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassPids {
				log, _ := os.ReadFile(filepath.Join(n.taskDir("LIMITED"), taskfiles.FileLog))
				t.Errorf("a fork bomb in setup as uid %d: %+v, log %q; want failed with class pids", nodeUID(n), st, log)
			}
			if _, err := os.Stat(filepath.Join(n.taskDir("LIMITED"), taskfiles.DirOutput, "ran")); err == nil {
				t.Error("the tool ran after its setup failed")
			}
			wtest.Poll(t, 5*time.Second, "no sleeper of the fork bomb left", func() bool { return sleepersLeft() == 0 })
		})
	}
}

// nodeUID is the uid a sandboxNode's wrapper runs as.
func nodeUID(n *sandboxNode) int {
	if n.cred != nil {
		return int(n.cred.Uid)
	}
	return os.Geteuid()
}

// TestForkRefused: the words of a refused fork or thread, from the
// shells and runtimes a tool is made of, class a failure pids when
// RLIMIT_NPROC was set; EAGAIN on a socket does not.
func TestForkRefused(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"dash", "/bin/sh: 0: Cannot fork\n", true},
		{"busybox", "sh: can't fork: Resource temporarily unavailable\n", true},
		{"bash", "bash: fork: retry: Resource temporarily unavailable\nbash: fork: Resource temporarily unavailable\n", true},
		{"go", "runtime: failed to create new OS thread (have 12 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc\n", true},
		{"node", "Error: spawn EAGAIN\n    at ChildProcess._handle.onexit\n", true},
		{"glibc", "pthread_create failed: Resource temporarily unavailable\n", true},
		{"a socket's EAGAIN", "read tcp: Resource temporarily unavailable\nexit 1\n", false},
		{"a plain failure", "tests failed: 3 of 40\n", false},
		{"nothing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := limits.ForkRefused([]byte(tc.log)); got != tc.want {
				t.Errorf("forkRefused(%q) = %v, want %v", tc.log, got, tc.want)
			}
		})
	}
}

func TestLimitsFileSize(t *testing.T) {
	t.Parallel()
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			n := newLimitsNode(t, "", sandboxed)
			st, _, _ := limitsRun(t, n, &wire.Limits{FileSizeBytes: 1 << 20}, `set -e; head -c 3000000 /dev/zero > big; echo wrote-all > after`)
			if st.Status != wire.StatusFailed {
				t.Errorf("writing past file_size: %+v, want failed", st)
			}
			out := filepath.Join(n.taskDir("LIMITED"), taskfiles.DirOutput)
			if fi, err := os.Stat(filepath.Join(out, "big")); err != nil || fi.Size() > 1<<20 {
				log, _ := os.ReadFile(filepath.Join(n.taskDir("LIMITED"), taskfiles.FileLog))
				t.Errorf("the file written past file_size: %v, %v; want at most 1 MiB; log %s, %+v", fi, err, log, st)
			}
			if _, err := os.Stat(filepath.Join(out, "after")); err == nil {
				t.Error("the write past file_size succeeded")
			}
		})
	}
}

// TestWatchdogSampleWalksTheTree: between two scans of every process the
// watchdog walks only the attempt's tree, and still counts a member of
// its group that left the tree (a double fork) by the pid the last scan
// found: the light sample sees what a scan sees.
func TestWatchdogSampleWalksTheTree(t *testing.T) {
	if !limits.HasChildrenFiles() {
		t.Fatal("this kernel has no /proc/<pid>/task/<tid>/children; the watchdog scans every process there")
	}
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & (sleep 60 &); sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-root, syscall.SIGKILL); cmd.Wait() })
	pids := func(ps []limits.ProcInfo) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.Pid)
		}
		slices.Sort(out)
		return out
	}
	var scanned []limits.ProcInfo
	wtest.Poll(t, 10*time.Second, "the shell and its three sleeps", func() bool {
		procs, err := limits.ScanProcs()
		if err != nil {
			t.Fatal(err)
		}
		scanned = limits.AttemptProcs(procs, root)
		return len(scanned) == 4
	})
	tree, ok := limits.TreeProcs(root)
	if !ok || len(tree) != 3 {
		t.Fatalf("the tree walk found %v (ok %v); want the shell and its two sleeps, not the one that left", pids(tree), ok)
	}
	var outsiders []limits.ProcInfo
	full, err := limits.SampleAttempt(root, true, &outsiders)
	if err != nil || !slices.Equal(pids(full), pids(scanned)) || len(outsiders) != 1 {
		t.Fatalf("a full sample: %v (%v), outsiders %v; want %v and one outsider", pids(full), err, pids(outsiders), pids(scanned))
	}
	light, err := limits.SampleAttempt(root, false, &outsiders)
	if err != nil || !slices.Equal(pids(light), pids(scanned)) {
		t.Fatalf("a light sample: %v (%v); want what the scan saw, %v", pids(light), err, pids(scanned))
	}
}
