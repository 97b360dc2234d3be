package wrapper

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
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

// TestBatchFileCalls: what does not change between the attempts of one
// supervisor is read or opened once, not once an attempt: its own start
// time (/proc/<pid>/stat), the children's stdin (/dev/null). A file of
// /proc is read in three or four calls (open, read to its end, close),
// not through an *os.File (the runtime's poller, a stat for the size); a
// task.log is opened without the poller's calls either.
func TestBatchFileCalls(t *testing.T) {
	t.Parallel()
	strace := needStrace(t)
	root := t.TempDir()
	var batch wire.LaunchBatch
	var tasks []*testTask
	for _, id := range []string{"T1", "T2", "T3"} {
		l := wire.Launch{Project: "demo", Task: id, Attempt: 1, Node: "local", Command: shell("true"), HeartbeatSeconds: 60, TimeoutSeconds: 20}
		tk := newTask(t, root, l)
		// `launch` makes it, as for a task's first attempt.
		if err := os.RemoveAll(tk.dir); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
		batch.Launches = append(batch.Launches, wire.LaunchItem{Dir: tk.dir, Spec: "# spec\n", Launch: l})
	}
	doc, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	c := strace1(t, strace, string(doc), "launch")
	for _, tk := range tasks {
		if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
			t.Fatalf("%s: final status %+v, want completed", tk.name, st)
		}
	}
	procStats := c.matchingRE(`[("<]/proc/\d+/stat[">]`)
	opened := 0
	for _, l := range procStats {
		if strings.Contains(l, "openat(") {
			opened++
		}
	}
	// The tool's start time, each; the supervisor's own, once.
	if opened > len(tasks)+1 {
		t.Errorf("/proc/<pid>/stat opened %d times for %d attempts, want at most %d:\n%s", opened, len(tasks), len(tasks)+1, strings.Join(procStats, "\n"))
	}
	if len(procStats) > 4*opened {
		t.Errorf("%d calls on /proc/<pid>/stat for %d reads, want at most 4 a read:\n%s", len(procStats), opened, strings.Join(procStats, "\n"))
	}
	// `launch` opens it for the supervisor's stdout, the supervisor once.
	if n := c.count("openat", "/dev/null"); n > 2 {
		t.Errorf("/dev/null opened %d times for %d attempts, want twice: `launch` and the supervisor once each", n, len(tasks))
	}
	// `launch`: each new task directory made in one call, the live index
	// looked at once a launch.
	live := filepath.Join(root, "demo", "tasks", nodestatus.DirLive)
	if n := c.count("mkdirat", live) + c.count("newfstatat", live); n > len(tasks)+1 {
		t.Errorf("%s: %d mkdirat or newfstatat calls for %d launches, want at most %d", live, n, len(tasks), len(tasks)+1)
	}
	for _, tk := range tasks {
		if n := c.count("mkdirat", tk.dir) + c.count("newfstatat", tk.dir); n > 1 {
			t.Errorf("%s: %d mkdirat or newfstatat calls, want one:\n%s", tk.dir, n, strings.Join(append(c.matching("mkdirat", tk.dir), c.matching("newfstatat", tk.dir)...), "\n"))
		}
		if n := len(c.matchingRE(`^\d+ +(fcntl|epoll_ctl)\(\d+<` + regexp.QuoteMeta(tk.path(taskfiles.FileLog)) + `>, (F_SETFL|EPOLL_CTL_ADD)`)); n > 0 {
			t.Errorf("%s: %d fcntl(F_SETFL) or epoll_ctl calls on task.log, want none", tk.name, n)
		}
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
	strace := needStrace(t)
	tk := newTask(t, "", l)
	c := strace1(t, strace, "", "run", "--dir", tk.dir)
	c.task = tk
	tk.waitFinal(t)
	return c
}

// strace1 runs the wrapper with args and stdin under `strace -f -y` (its
// children too, to their end: the supervisor) and returns the file and
// descriptor calls it logged, descriptors with their paths.
func strace1(t *testing.T, strace, stdin string, args ...string) tracedCalls {
	t.Helper()
	log := filepath.Join(t.TempDir(), "strace.log")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, append([]string{"-f", "-qq", "-y", "-o", log, "-e", "trace=%file,%desc", wrapperBin}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "ptrace") || strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("strace may not trace here: %s", out)
		}
		t.Fatalf("strace %s: %v: %s", args[0], err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var c tracedCalls
	for _, l := range strings.Split(string(data), "\n") {
		// A call another thread's interrupted is logged twice: counted
		// once, at its start (which names its arguments).
		if !strings.Contains(l, "<... ") {
			c.lines = append(c.lines, l)
		}
	}
	if len(c.lines) < 2 {
		t.Fatal("strace logged nothing")
	}
	return c
}

// matchingRE are the lines that match expr.
func (c tracedCalls) matchingRE(expr string) []string {
	re := regexp.MustCompile(expr)
	var out []string
	for _, l := range c.lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// TestWatchLooksOnceAChange: `watch` probes a task's lock when a file
// event makes it look (the look stats status.json first), and the change
// frame it sends takes that probe, probed before the status is read, as
// `status` does: not a second one. The .ctl directory, where it reads a
// final attempt's record, is checked once; launch.json, which says whose
// attempt it is, is read once an attempt.
func TestWatchLooksOnceAChange(t *testing.T) {
	t.Parallel()
	strace := needStrace(t)
	root := t.TempDir()
	tk := newTask(t, root, wire.Launch{Command: shell("true"), HeartbeatSeconds: 60})
	log := filepath.Join(t.TempDir(), "strace.log")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd, in, lines := stracedWatch(t, ctx, strace, []string{"-f", "-qq", "-y", "-o", log, "-e", "trace=%file,%desc"}, "--root", root, "--node", "local")
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
	c := tracedCalls{task: tk}
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, "<... ") {
			c.lines = append(c.lines, l)
		}
	}
	looks, probes := c.count("newfstatat", tk.path(taskfiles.FileStatus)), c.count("openat", tk.path(taskfiles.FileLock))
	if probes > looks {
		t.Errorf("%d frames: %d looks at the task (stats of its status.json) and %d probes of its lock, want a probe a look at most:\n%s", frames, looks, probes, strings.Join(c.matching("openat", tk.path(taskfiles.FileLock)), "\n"))
	}
	ctl := filepath.Join(filepath.Dir(wrapperBin), proc.CtlDirName)
	if n := c.count("mkdirat", ctl); n > 1 {
		t.Errorf("%s checked %d times, want once", ctl, n)
	}
	// A control file is read in four calls: open, stat (a regular file?),
	// read (one shorter than asked is the end), close.
	reads := c.count("openat", tk.path(taskfiles.FileStatus))
	status := regexp.QuoteMeta(tk.path(taskfiles.FileStatus))
	if calls := c.matchingRE(`openat\(.*"` + status + `"|\(\d+<` + status + `>`); len(calls) > 4*reads {
		t.Errorf("%d calls on status.json for %d reads, want at most 4 a read:\n%s", len(calls), reads, strings.Join(calls, "\n"))
	}
	// Which node the attempt is (--node): launch.json read once, not
	// once a frame.
	if n := c.count("openat", tk.path(taskfiles.FileLaunch)); n > 1 {
		t.Errorf("%d frames: launch.json read %d times, want once", frames, n)
	}
}

// TestWatchLooksAtANewProjectOnly: a node keeps the task directories of
// every project it ran. `watch` looks at them once when it starts (a stat
// of each status.json, no lock probed but those of the live index) and
// not again when a new project comes: that project alone is watched and
// looked at.
func TestWatchLooksAtANewProjectOnly(t *testing.T) {
	t.Parallel()
	strace := needStrace(t)
	root := t.TempDir()
	var old []string
	for _, id := range []string{"T1", "T2", "T3"} {
		dir := filepath.Join(root, "old", "tasks", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{taskfiles.FileStatus: `{"status":"completed","attempt":1}`, taskfiles.FileLock: ""} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old = append(old, dir)
	}
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd, in, lines := stracedWatch(t, t.Context(), strace, []string{"-f", "-qq", "-o", log, "-e", "trace=%file,%desc"}, "--root", root, "--node", "local")
	if !lines.Scan() || !strings.Contains(lines.Text(), wire.FrameHello) {
		t.Fatalf("first frame %q, want hello (%v)", lines.Text(), lines.Err())
	}
	dir := filepath.Join(root, "new", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"completed","attempt":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() && !strings.Contains(lines.Text(), `"new/T1"`) {
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch under strace: %v", err)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	c := tracedCalls{lines: strings.Split(string(data), "\n")}
	// Listed twice as the watch starts: looked at, and watched.
	if n := c.count("openat", filepath.Join(root, "old", "tasks")); n > 2 {
		t.Errorf("old/tasks listed %d times, want twice", n)
	}
	for _, dir := range old {
		if n := c.count("openat", filepath.Join(dir, taskfiles.FileLock)); n > 0 {
			t.Errorf("%s: lock probed %d times, want none (not in the live index)", dir, n)
		}
		if n := c.count("newfstatat", filepath.Join(dir, taskfiles.FileStatus)); n > 1 {
			t.Errorf("%s: status.json looked at %d times, want once", dir, n)
		}
	}
	if c.count("openat", filepath.Join(dir, taskfiles.FileLock)) == 0 {
		t.Errorf("the new task's lock was never probed")
	}
}

// TestWatchReadsEventsInBursts: the file events of a node come in bursts
// (an atomic write is three, an attempt's start a dozen); watch reads
// them a burst at a time, not an event at a time, each read a wake-up of
// its reader (the read of nothing that follows each, another).
func TestWatchReadsEventsInBursts(t *testing.T) {
	t.Parallel()
	strace := needStrace(t)
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "strace.log")
	// One file a thread (-ff): no call is split in two lines by another's.
	cmd, in, lines := stracedWatch(t, t.Context(), strace, []string{"-ff", "-qq", "-y", "-o", log, "-e", "trace=read"}, "--root", root)
	if !lines.Scan() || !strings.Contains(lines.Text(), wire.FrameHello) {
		t.Fatalf("first frame %q, want hello (%v)", lines.Text(), lines.Err())
	}
	// Files written as a supervisor writes them (heartbeats, logs:
	// events that say nothing), then the status the frame waits for.
	const writes = 200
	began := time.Now()
	for i := range writes {
		if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileHeartbeat), []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"completed","attempt":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	for lines.Scan() && !strings.Contains(lines.Text(), `"demo/T1"`) {
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch under strace: %v", err)
	}
	logs, err := filepath.Glob(log + ".*")
	if err != nil || len(logs) == 0 {
		t.Fatalf("no strace log %s.*: %v", log, err)
	}
	var data []byte
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	// Read at most every ReadGap while the events come: about took/ReadGap
	// reads that return events, and a few more for the events the writes'
	// last moment queued and the reader's own lag. A read that finds
	// nothing (EAGAIN, then the reader waits for the poller) wakes nobody
	// up and is not counted.
	returned := regexp.MustCompile(`^read\(\d+<anon_inode:inotify>.* = [1-9]\d*$`)
	reads := 0
	for _, l := range strings.Split(string(data), "\n") {
		if returned.MatchString(l) {
			reads++
		}
	}
	bound := int(took/nodestatus.ReadGap) + 5
	if reads > bound {
		t.Errorf("%d reads returned file events for %d writes (%d events) in %s, want at most %d (one each %s)", reads, writes+1, 3*(writes+1), took, bound, nodestatus.ReadGap)
	} else {
		t.Logf("%d reads returned file events for %d writes in %s (at most %d)", reads, writes+1, took, bound)
	}
}

// needStrace returns strace's path. Without it the test is skipped, except
// in CI, where .ci/test-deps installs it and its absence fails the test.
func needStrace(t *testing.T) string {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("strace is not installed (.ci/test-deps installs it: apt-get install strace): %v", err)
		}
		t.Skip("no strace:", err)
	}
	return strace
}

// stracedWatch starts `wrapper watch args…` under strace with straceArgs
// and returns it, its stdin and its frames' lines.
func stracedWatch(t *testing.T, ctx context.Context, strace string, straceArgs []string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	argv := append(append(straceArgs, wrapperBin, "watch"), args...)
	cmd := exec.CommandContext(ctx, strace, argv...)
	in, lines := startPiped(t, cmd)
	return cmd, in, lines
}
