package wrapper

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// The file system calls of an attempt are most of what it costs a node
// (perf over 200 no-op attempts: the kernel's openat, mkdirat, renameat and
// fstatat). TestQuickAttemptFileCalls counts, under strace, the calls of
// one quick first attempt (`run` and its supervisor) that the wrapper made
// without a contract asking for them: the .ctl directory checked once a
// process, not at each of its four uses; no stat of a file about to be
// replaced by rename (os.Rename's, for directories); one listing of the
// task directory (moving the earlier attempt aside, and what old scratch
// there is to remove), not five; a stale kill request removed in one
// call; no read of a status.json the listing shows is not there.
func TestQuickAttemptFileCalls(t *testing.T) {
	t.Parallel()
	calls := straceAttempt(t, wire.Launch{Command: shell("true"), HeartbeatSeconds: 60})
	tk := calls.task
	ctl := filepath.Join(filepath.Dir(wrapperBin), proc.CtlDirName)
	for _, tc := range []struct {
		call, path string
		max        int
	}{
		// run's lookup and the supervisor's: one each.
		{"mkdirat", ctl, 2},
		{"newfstatat", ctl, 2},
		{"newfstatat", tk.path(taskfiles.FileStatus), 0},
		{"newfstatat", tk.path(taskfiles.FilePID), 0},
		{"newfstatat", tk.path(taskfiles.FileHeartbeat), 0},
		// The listing, and the directory synced with the final status.
		{"openat", tk.dir, 2},
		{"openat", tk.path(taskfiles.FileStatus) + " O_RDONLY", 0},
		{"unlinkat", ".kill", 1},
	} {
		if n := calls.count(tc.call, tc.path); n > tc.max {
			t.Errorf("%s %s: %d calls, want at most %d:\n%s", tc.call, tc.path, n, tc.max, calls.matching(tc.call, tc.path))
		}
	}
	if st := tk.status(t); st.Status != wire.StatusCompleted {
		t.Fatalf("final status %+v, want completed", st)
	}
}

// tracedCalls are the lines of an strace log.
type tracedCalls struct {
	task  *testTask
	lines []string
}

var tracedCall = regexp.MustCompile(`^(?:\[pid +\d+\] |\d+ +)?([a-z0-9_]+)\(`)

// count is how many calls named call have path (a string the line
// holds; a second word, after a space, a flag it holds too).
func (c tracedCalls) count(call, path string) int {
	return len(c.matching(call, path))
}

func (c tracedCalls) matching(call, path string) []string {
	p, flag, _ := strings.Cut(path, " ")
	// A path, or the end of one (".kill").
	quoted := `"` + p + `"`
	if strings.HasPrefix(p, ".") {
		quoted = p + `"`
	}
	var out []string
	for _, l := range c.lines {
		if m := tracedCall.FindStringSubmatch(l); m != nil && m[1] == call && strings.Contains(l, quoted) && strings.Contains(l, flag) {
			out = append(out, l)
		}
	}
	return out
}

// straceAttempt runs one attempt of l with `run --dir` under `strace -f`
// (the supervisor too, to its end) and returns its file calls; skipped
// where strace is missing or may not trace.
func straceAttempt(t *testing.T, l wire.Launch) tracedCalls {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("no strace:", err)
	}
	tk := newTask(t, "", l)
	log := filepath.Join(t.TempDir(), "strace.log")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, "-f", "-qq", "-o", log, "-e", "trace=%file,%desc", wrapperBin, "run", "--dir", tk.dir)
	cmd.Stdin = strings.NewReader("")
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "ptrace") || strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("strace may not trace here: %s", out)
		}
		t.Fatalf("strace run: %v: %s", err, out)
	}
	tk.waitFinal(t)
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := tracedCalls{task: tk}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		c.lines = append(c.lines, sc.Text())
	}
	if len(c.lines) == 0 {
		t.Fatal("strace logged nothing")
	}
	return c
}

// TestWatchLooksOnceAChange: `watch` probes a task's lock when a file
// event makes it look (the look stats status.json first), and the change
// frame it sends takes that probe, probed before the status is read, as
// `status` does: not a second one. The .ctl directory, where it reads a
// final attempt's record, is checked once.
func TestWatchLooksOnceAChange(t *testing.T) {
	t.Parallel()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("no strace:", err)
	}
	root := t.TempDir()
	tk := newTask(t, root, wire.Launch{Command: shell("true"), HeartbeatSeconds: 60})
	log := filepath.Join(t.TempDir(), "strace.log")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, "-f", "-qq", "-o", log, "-e", "trace=%file,%desc", wrapperBin, "watch", "--root", root, "--node", "local")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	next := func() wire.Frame {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch ended: %v", cmd.Wait())
		}
		var f wire.Frame
		if err := json.Unmarshal(lines.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", lines.Text(), err)
		}
		return f
	}
	if f := next(); f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	tk.run(t, "")
	tk.waitFinal(t)
	frames := 0
	for final := false; !final; {
		f := next()
		for _, ts := range f.Statuses {
			frames++
			final = ts.Status != nil && ts.Status.Final() && !ts.Alive
		}
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch under strace: %v", err)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	c := tracedCalls{task: tk, lines: strings.Split(string(data), "\n")}
	looks, probes := c.count("newfstatat", tk.path(taskfiles.FileStatus)), c.count("openat", tk.path(taskfiles.FileLock))
	if probes > looks {
		t.Errorf("%d frames: %d looks at the task (stats of its status.json) and %d probes of its lock, want a probe a look at most:\n%s", frames, looks, probes, strings.Join(c.matching("openat", tk.path(taskfiles.FileLock)), "\n"))
	}
	ctl := filepath.Join(filepath.Dir(wrapperBin), proc.CtlDirName)
	if n := c.count("mkdirat", ctl); n > 1 {
		t.Errorf("%s checked %d times, want once", ctl, n)
	}
}
