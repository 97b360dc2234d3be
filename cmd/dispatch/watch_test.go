package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// tmuxSession is a detached tmux session of a fixed size on a server of its
// own, so that tests never share one.
type tmuxSession struct {
	t      *testing.T
	bin    string
	socket string
	env    []string
}

var tmuxSockets atomic.Int64

// requireTmux returns the tmux binary, skipping the test without it, except
// in CI where a skipped terminal test would hide a broken view.
func requireTmux(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tmux is needed to check the live view in a real terminal (CI=true does not skip): %v", err)
		}
		t.Skip("tmux is not installed; it is needed to check the live view in a real terminal")
	}
	return bin
}

// newTmux runs the shell command line in a new width×height session, the
// way a person runs it from a shell: when it exits, the shell says so under
// what it left on the screen.
func newTmux(t *testing.T, bin string, width, height int, env []string, cmdline string) *tmuxSession {
	t.Helper()
	s := &tmuxSession{t: t, bin: bin, socket: fmt.Sprintf("dispatch-test-%d-%d", os.Getpid(), tmuxSockets.Add(1))}
	for _, kv := range baseEnv {
		if !strings.HasPrefix(kv, "TMUX=") && !strings.HasPrefix(kv, "TERM=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(append(s.env, "TERM=xterm-256color"), env...)
	var path string
	t.Cleanup(func() {
		_ = exec.Command(bin, "-L", s.socket, "kill-server").Run()
		if path != "" {
			_ = os.Remove(path) // kill-server leaves the socket file behind
		}
	})
	s.run("-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height),
		cmdline+`; echo "[exit $?]"; exec sleep 300`)
	path = strings.TrimSpace(s.run("display-message", "-p", "#{socket_path}"))
	return s
}

func (s *tmuxSession) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.bin, append([]string{"-L", s.socket}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the pane shows now, with its colours as escape codes when
// escapes is set.
func (s *tmuxSession) screen(escapes bool) string {
	s.t.Helper()
	if escapes {
		return s.run("capture-pane", "-p", "-e", "-t", "w")
	}
	return s.run("capture-pane", "-p", "-t", "w")
}

var exitLine = regexp.MustCompile(`(?m)^\[exit (\d+)\]$`)

// exited reports whether the command in the pane has exited, by the line
// the shell printed after it, and its exit status.
func exited(screen string) (bool, int) {
	m := exitLine.FindStringSubmatch(screen)
	if m == nil {
		return false, 0
	}
	code, _ := strconv.Atoi(m[1])
	return true, code
}

// waitScreen polls the pane until cond holds for what it shows and returns
// that screen.
func (s *tmuxSession) waitScreen(timeout time.Duration, what string, cond func(string) bool) string {
	s.t.Helper()
	var scr string
	deadline := time.Now().Add(timeout)
	for {
		scr = s.screen(false)
		if cond(scr) {
			return scr
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %s waiting for the terminal to show %s; it shows:\n%s", timeout, what, scr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is a buffer that a test may read while a subprocess writes
// to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// watchCmdline is the shell command line of `dispatch status --watch`.
func watchCmdline(home string, args ...string) string {
	parts := []string{shellQuote(dispatchBin), "--home", shellQuote(home), "status"}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// watchProject writes a project of n shell tasks that each take sleep.
func watchProject(t *testing.T, home, name string, n int, sleep string) {
	t.Helper()
	dir := filepath.Join(home, "specs", name)
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	for i := 1; i <= n; i++ {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("S%02d-step.md", i)),
			fmt.Sprintf("# Step %d of the watched batch\nsleep %s\necho %d > out.txt\n", i, sleep, i))
	}
}

// taskLine returns the line of screen whose first field is the task ID.
func taskLine(screen, id string) string {
	for _, l := range strings.Split(screen, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == id {
			return l
		}
	}
	return ""
}

var (
	stateWord = regexp.MustCompile(`\b(pending|claimed|running|completed|failed|blocked|canceled|lost)\b`)
	ansiCode  = regexp.MustCompile("\x1b\\[[0-9;]*m")
)

// TestWatchTerminal runs a batch and watches it the way a person does: in
// real terminals (tmux) of two sizes, piped to a file, and as JSON Lines;
// then watches the finished project without colour and piped.
func TestWatchTerminal(t *testing.T) {
	tmux := requireTmux(t)
	home, _ := newLocalHome(t)
	const project = "watched"
	ids := []string{"S01", "S02", "S03"}
	watchProject(t, home, project, len(ids), "1.5")

	wait := startBackground(t, nil, "--home", home, "start", project)
	pollUntil(t, 20*time.Second, "the project to be started", func() bool {
		return taskState(t, home, project, "S01").ID != ""
	})

	live := newTmux(t, tmux, 120, 40, nil, watchCmdline(home, project, "--watch", "--interval", "200ms"))
	small := newTmux(t, tmux, 60, 10, nil, watchCmdline(home, project, "--watch", "--interval", "200ms"))
	interrupted := newTmux(t, tmux, 100, 30, nil, watchCmdline(home, project, "--watch", "--interval", "200ms"))
	type bg struct {
		cmd            *exec.Cmd
		stdout, stderr *lockedBuffer
		err            chan error
	}
	background := func(args ...string) *bg {
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		t.Cleanup(cancel)
		cmd, _, _ := dispatchCmd(ctx, nil, append([]string{"--home", home, "status", project}, args...)...)
		b := &bg{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, err: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = b.stdout, b.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { b.err <- cmd.Wait() }()
		return b
	}
	piped := background("--watch", "--interval", "100ms")
	jsonl := background("--watch", "--json", "--interval", "100ms")
	termed := background("--watch", "--interval", "100ms")

	// While the batch runs.
	scr := live.waitScreen(20*time.Second, "a running task", func(s string) bool {
		return slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(taskLine(s, id), "running") })
	})
	colored := live.screen(true)
	t.Logf("live view while running (120x40):\n%s", scr)
	lines := strings.Split(scr, "\n")
	if !strings.HasPrefix(lines[0], project) || !strings.Contains(lines[0], "phase implementation") {
		t.Errorf("first line should name the project and its phase, got %q", lines[0])
	}
	if !strings.Contains(scr, "█") && !strings.Contains(scr, "▒") || !strings.Contains(scr, "░") {
		t.Errorf("no progress bar on the screen:\n%s", scr)
	}
	if !regexp.MustCompile(`\d/3 completed`).MatchString(scr) {
		t.Errorf("no done/total count on the screen:\n%s", scr)
	}
	for _, id := range ids {
		if l := taskLine(scr, id); !stateWord.MatchString(l) {
			t.Errorf("task %s has no row with its state on the screen:\n%s", id, scr)
		}
	}
	if !strings.Contains(scr, "TITLE") || !strings.Contains(scr, "Step 1 of the watched batch") {
		t.Errorf("task titles missing:\n%s", scr)
	}
	node := regexp.MustCompile(`(?m)^local\s+online\s+[12]/2\b`)
	if !strings.Contains(scr, "SLOTS") || !node.MatchString(scr) {
		t.Errorf("no node row with its state and the slots in use (local online n/2):\n%s", scr)
	}
	if !strings.Contains(colored, "\x1b[") {
		t.Errorf("no colour on a terminal (capture-pane -e shows no escape codes):\n%q", colored)
	}
	// A running task's state is drawn in its colour (cyan).
	if !regexp.MustCompile("\x1b\\[36mrunning").MatchString(colored) {
		t.Errorf("the running state is not coloured:\n%q", colored)
	}

	// The short terminal keeps to its size and says what it leaves out.
	sm := small.waitScreen(10*time.Second, "the view cut to its height", func(s string) bool {
		return strings.Contains(s, "more:") && strings.Contains(s, "running")
	})
	t.Logf("live view while running (60x10):\n%s", sm)
	for _, l := range strings.Split(strings.TrimRight(sm, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 60 {
			t.Errorf("line wider than the 60-column terminal (%d): %q", n, l)
		}
	}
	if n := strings.Count(strings.TrimRight(sm, "\n"), "\n") + 1; n > 10 {
		t.Errorf("%d lines in a 10-line terminal:\n%s", n, sm)
	}

	// Ctrl-C ends the view with exit 130 (an interrupted program), SIGTERM
	// with exit 0, and both give the terminal back.
	interrupted.waitScreen(10*time.Second, "the live view", func(s string) bool { return strings.Contains(s, "Ctrl-C quits") })
	interrupted.run("send-keys", "-t", "w", "C-c")
	scr = interrupted.waitScreen(10*time.Second, "the view ended by Ctrl-C", func(s string) bool {
		done, _ := exited(s)
		return done
	})
	if _, code := exited(scr); code != 130 || !strings.HasPrefix(scr, project) {
		t.Errorf("after Ctrl-C: want exit 130 and the last frame left on the screen:\n%s", scr)
	}
	if got := strings.TrimSpace(interrupted.run("display-message", "-p", "-t", "w", "#{alternate_on} #{cursor_flag}")); got != "0 1" {
		t.Errorf("after Ctrl-C the terminal is not restored: alternate screen, cursor visible = %q, want \"0 1\"", got)
	}
	pollUntil(t, 10*time.Second, "a snapshot from the watch to terminate", func() bool { return termed.stdout.String() != "" })
	if err := termed.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-termed.err; err != nil {
		t.Errorf("status --watch after SIGTERM: %v (want exit 0)\n%s", err, termed.stderr)
	}

	// Finished: the view draws the end and exits 0, leaving it on the screen.
	scr = live.waitScreen(30*time.Second, "the finished project", func(s string) bool {
		done, _ := exited(s)
		return done
	})
	t.Logf("after the batch:\n%s", scr)
	if _, code := exited(scr); code != 0 {
		t.Errorf("status --watch exited %d after the project finished, want 0", code)
	}
	if !strings.HasPrefix(scr, project) || !strings.Contains(scr, "phase done") || !strings.Contains(scr, "passed") ||
		!strings.Contains(scr, "3/3 completed") {
		t.Errorf("the finished screen should start with the project, say phase done, passed and 3/3 completed:\n%s", scr)
	}
	for _, id := range ids {
		if l := taskLine(scr, id); !strings.Contains(l, "completed") {
			t.Errorf("task %s is not shown completed: %q", id, l)
		}
	}
	if r := wait(); r.code != 0 {
		t.Fatalf("dispatch start: %s", r)
	}

	// Piped while it ran: the status text at each change, then the end.
	select {
	case err := <-piped.err:
		if err != nil {
			t.Fatalf("piped status --watch: %v\n%s%s", err, piped.stdout, piped.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("piped status --watch did not exit after the project finished")
	}
	out := piped.stdout.String()
	assertPlain(t, "piped status --watch", out)
	stamp := regexp.MustCompile(`(?m)^--- \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ---$`)
	snaps := stamp.Split(out, -1)[1:]
	if len(snaps) < 2 {
		t.Fatalf("piped status --watch printed %d snapshots, want one per change (at least 2):\n%s", len(snaps), out)
	}
	if !strings.Contains(snaps[0], "phase implementation") || !strings.Contains(snaps[len(snaps)-1], "phase done, passed") {
		t.Errorf("piped snapshots should go from the running batch to the finished one:\n%s", out)
	}
	for i := 1; i < len(snaps); i++ {
		if snaps[i] == snaps[i-1] {
			t.Errorf("snapshot %d repeats the one before; only changes should be printed:\n%s", i, out)
		}
	}

	// JSON Lines while it ran.
	if err := <-jsonl.err; err != nil {
		t.Fatalf("status --watch --json: %v\n%s", err, jsonl.stderr)
	}
	assertPlain(t, "status --watch --json", jsonl.stdout.String())
	jl := strings.Split(strings.TrimSuffix(jsonl.stdout.String(), "\n"), "\n")
	if len(jl) < 2 {
		t.Fatalf("status --watch --json printed %d lines, want one per change:\n%s", len(jl), jsonl.stdout)
	}
	for i, l := range jl {
		assertStatusShape(t, l)
		var s statusJSON
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if s.Project != project {
			t.Errorf("line %d is the status of %q", i+1, s.Project)
		}
		if last := i == len(jl)-1; last != (s.Phase == string(domain.PhaseDone)) {
			t.Errorf("line %d of %d has phase %s; only the last one should be done", i+1, len(jl), s.Phase)
		}
	}

	// The finished project: drawn once, then exit 0, at once.
	start := time.Now()
	r := runDispatch(t, nil, "--home", home, "status", project, "--watch")
	if r.code != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("status --watch of a finished project should print once and exit 0 promptly (took %s): %s", time.Since(start), r)
	}
	assertPlain(t, "piped status --watch of a finished project", r.stdout)
	if n := len(stamp.FindAllString(r.stdout, -1)); n != 1 || !strings.Contains(r.stdout, "phase done, passed") {
		t.Errorf("want one snapshot of the finished project, got %d:\n%s", n, r.stdout)
	}

	r = runDispatch(t, nil, "--home", home, "status", "--watch", "--json")
	var all struct {
		Projects []json.RawMessage `json:"projects"`
	}
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &all) != nil || len(all.Projects) != 1 {
		t.Errorf("status --watch --json without a project should print one {\"projects\": [...]} line: %s", r)
	}

	// NO_COLOR on a terminal: plain text, no escape codes at all.
	plain := newTmux(t, tmux, 120, 40, []string{"NO_COLOR=1"}, watchCmdline(home, project, "--watch", "--interval", "200ms"))
	plain.waitScreen(10*time.Second, "the status of the finished project", func(s string) bool {
		done, _ := exited(s)
		return done
	})
	scr = plain.screen(true)
	if strings.Contains(scr, "\x1b") {
		t.Errorf("NO_COLOR=1: escape codes on the screen:\n%q", scr)
	}
	if !strings.Contains(scr, "phase done, passed") || !strings.Contains(taskLine(scr, "S01"), "completed") {
		t.Errorf("NO_COLOR=1: the status is missing:\n%s", scr)
	}
}

func TestWatchFlags(t *testing.T) {
	home, _ := newLocalHome(t)
	watchProject(t, home, "flags", 1, "0")
	if r := runDispatch(t, nil, "--home", home, "start", "flags"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	for _, args := range [][]string{
		{"status", "flags", "--interval", "1s"},
		{"status", "flags", "--watch", "--interval", "0s"},
	} {
		if r := runDispatch(t, nil, append([]string{"--home", home}, args...)...); r.code != 2 || !strings.Contains(r.stderr, "--interval") {
			t.Errorf("dispatch %s: want exit 2 naming --interval: %s", strings.Join(args, " "), r)
		}
	}
	if r := runDispatch(t, nil, "--home", home, "status", "nosuch", "--watch"); r.code != 2 {
		t.Errorf("status --watch of a project never started: want exit 2: %s", r)
	}
}

// TestWatchRenderFits lays out a frame with more tasks than the terminal has
// lines: running and failed tasks stay, the rest are counted, and nothing
// goes past the edges.
func TestWatchRenderFits(t *testing.T) {
	v := &readmodel.StatusView{Project: "big", Phase: domain.PhaseImplementation,
		Nodes: []readmodel.NodeView{{Name: "n1", State: "online", Slots: 4, Running: 2, LastError: "a long error\nover two lines"}}}
	for i := 1; i <= 30; i++ {
		tv := readmodel.TaskView{ID: fmt.Sprintf("S%02d", i), Title: strings.Repeat("a very long title ", 10), Status: domain.Completed}
		switch i {
		case 17, 23:
			tv.Status, tv.Node, tv.Attempt, tv.DurationSeconds = domain.Running, "n1", 1, 12
		case 29:
			tv.Status, tv.ErrorClass, tv.Error = domain.Failed, "exit", "exit status 1"
		case 30:
			tv.Status = domain.Pending
		}
		v.Tasks = append(v.Tasks, tv)
		v.Counts.Add(tv.Status)
	}
	f := &watchFrame{at: time.Now(), views: []*readmodel.StatusView{v},
		projects: map[string]domain.Project{"big": {Name: "big", StartedAt: time.Now().Add(-time.Minute)}}}
	for _, tc := range []struct {
		name          string
		width, height int
		color         bool
	}{
		{"80x24", 80, 24, true},
		{"40x13 plain", 40, 13, false},
		{"200x60", 200, 60, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderWatch(newStyles(tc.color), f, []string{"note: something"}, tc.width, tc.height, "footer")
			if strings.Contains(out, "\x1b") != tc.color {
				t.Errorf("escape codes = %v, want %v", strings.Contains(out, "\x1b"), tc.color)
			}
			lines := strings.Split(out, "\n")
			if len(lines) > tc.height {
				t.Errorf("%d lines for a height of %d:\n%s", len(lines), tc.height, out)
			}
			for _, l := range lines {
				if w := utf8.RuneCountInString(ansiCode.ReplaceAllString(l, "")); w >= tc.width {
					t.Errorf("line of %d columns for a width of %d: %q", w, tc.width, l)
				}
			}
			plain := ansiCode.ReplaceAllString(out, "")
			for _, id := range []string{"S17", "S23", "S29"} {
				if taskLine(plain, id) == "" {
					t.Errorf("%s (running or failed) is not shown:\n%s", id, plain)
				}
			}
			if tc.height >= 60 {
				if strings.Contains(plain, "more:") {
					t.Errorf("everything fits, yet tasks are left out:\n%s", plain)
				}
				return
			}
			m := regexp.MustCompile(`… (\d+) more: .*\d+ completed`).FindStringSubmatch(plain)
			if m == nil {
				t.Fatalf("no line counting the tasks left out:\n%s", plain)
			}
			shown := 0
			for _, l := range strings.Split(plain, "\n") {
				if regexp.MustCompile(`^S\d\d `).MatchString(l) {
					shown++
				}
			}
			if n, _ := strconv.Atoi(m[1]); n+shown != 30 {
				t.Errorf("%d shown + %d left out != 30 tasks:\n%s", shown, n, plain)
			}
		})
	}
}
