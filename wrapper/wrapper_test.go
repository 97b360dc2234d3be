package wrapper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// waitForGo makes a test tool block until the test creates output/go.
const waitForGo = `while [ ! -e go ]; do sleep 0.02; done; `

func TestVersion(t *testing.T) {
	t.Parallel()
	out, code := runWrapper(t, "", "version")
	var v wire.VersionReply
	if err := json.Unmarshal(out, &v); err != nil || code != 0 {
		t.Fatalf("version: exit %d, %q, %v", code, out, err)
	}
	if v != (wire.VersionReply{Version: "dev", OS: runtime.GOOS, Arch: runtime.GOARCH}) {
		t.Errorf("version = %+v", v)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	noStatus := newTask(t, "", wire.Launch{Command: shell("true")})
	emptyCmd := newTask(t, "", wire.Launch{})
	noLaunch := newTask(t, "", wire.Launch{Command: shell("true")})
	if err := os.Remove(noLaunch.path(taskfiles.FileLaunch)); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name  string
		stdin string
		args  []string
		kind  string
	}{
		{"no command", "", nil, wire.KindUsage},
		{"unknown command", "", []string{"frobnicate"}, wire.KindUsage},
		{"unknown flag", "", []string{"version", "--bogus"}, wire.KindUsage},
		{"run without dir", "", []string{"run"}, wire.KindUsage},
		{"run missing dir", "", []string{"run", "--dir", missing}, wire.KindNotFound},
		{"run without launch.json", "", []string{"run", "--dir", noLaunch.dir}, wire.KindNotFound},
		{"run empty command", "", []string{"run", "--dir", emptyCmd.dir}, wire.KindUsage},
		{"run bad env json", "{not json", []string{"run", "--dir", noStatus.dir}, wire.KindUsage},
		{"run env not strings", `{"N": 1}`, []string{"run", "--dir", noStatus.dir}, wire.KindUsage},
		{"status without root", "", []string{"status"}, wire.KindUsage},
		{"status bad project", "", []string{"status", "--root", missing, "--project", "../x"}, wire.KindUsage},
		{"kill without status", "", []string{"kill", "--dir", noStatus.dir}, wire.KindNotFound},
		{"kill bad grace", "", []string{"kill", "--dir", noStatus.dir, "--grace", "soon"}, wire.KindUsage},
		{"tail missing dir", "", []string{"tail", "--dir", missing}, wire.KindNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runWrapper(t, tc.stdin, tc.args...)
			wantError(t, out, code, tc.kind)
		})
	}
	// Refused runs must not have started anything.
	if _, err := os.Stat(noStatus.path(taskfiles.FileStatus)); err == nil {
		t.Errorf("a refused run wrote %s", taskfiles.FileStatus)
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     string
		wantStatus string
		wantCode   int
		wantClass  string
		wantError  string
	}{
		{"exit 0", "echo hello", wire.StatusCompleted, 0, "", ""},
		{"exit 3", "echo bad; exit 3", wire.StatusFailed, 3, wire.ClassExit, "exit status 3"},
		{"a shell task's 429 is an exit", `echo 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error"}}' >&2; exit 1`,
			wire.StatusFailed, 1, wire.ClassExit, "exit status 1"},
		{"a shell task's 401 is an exit", `echo 'API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}' >&2; exit 1`,
			wire.StatusFailed, 1, wire.ClassExit, "exit status 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Command: shell(tc.script)})
			reply := tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != tc.wantStatus || st.ExitCode != tc.wantCode || st.ErrorClass != tc.wantClass || st.Error != tc.wantError {
				t.Errorf("status %+v; want status %s, exit_code %d, error_class %q, error %q",
					st, tc.wantStatus, tc.wantCode, tc.wantClass, tc.wantError)
			}
			if st.PID != reply.PID || st.ToolPID <= 0 || st.ToolPID == st.PID || st.Attempt != 1 || st.Task != "T1" || st.WrapperVersion != "dev" {
				t.Errorf("status %+v: wrong identity fields (run reply %+v)", st, reply)
			}
			if st.Signal != "" {
				t.Errorf("signal = %q, want none", st.Signal)
			}
			if started, done := parseTime(t, st.StartedAt), parseTime(t, st.CompletedAt); done.Before(started) {
				t.Errorf("completed_at %s before started_at %s", st.CompletedAt, st.StartedAt)
			}
			log := tk.readFile(t, taskfiles.FileLog)
			if st.LogBytes != int64(len(log)) || st.LogBytes == 0 {
				t.Errorf("log_bytes = %d, task.log has %d bytes", st.LogBytes, len(log))
			}
			if pid := tk.readFile(t, taskfiles.FilePID); pid != strconv.Itoa(reply.PID)+"\n" {
				t.Errorf("pid file %q, want %d", pid, reply.PID)
			}
		})
	}
}

func TestEnvAndSecrets(t *testing.T) {
	t.Parallel()
	secret := fmt.Sprintf("sk-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	tk := newTask(t, "", wire.Launch{Node: "node-a", Attempt: 1, Command: shell("env > env.txt; " + waitForGo + "echo done")})
	stdin, err := json.Marshal(map[string]string{"API_KEY": secret, "WRAPPER_TEST_OVERRIDE": "from-stdin"})
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "WRAPPER_TEST_OVERRIDE=from-wrapper", "WRAPPER_TEST_INHERITED=from-wrapper")
	out, _, code, err := execWrapper(t.Context(), string(stdin), env, "run", "--dir", tk.dir)
	if err != nil || code != 0 {
		t.Fatalf("run: exit %d, %s, %v", code, out, err)
	}
	var reply wire.RunReply
	if err := json.Unmarshal(out, &reply); err != nil {
		t.Fatal(err)
	}
	wtest.Poll(t, 10*time.Second, "env.txt", func() bool {
		_, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "env.txt"))
		return err == nil
	})
	if runtime.GOOS == "linux" {
		// The supervisor got the secrets on a pipe: not in its argv or environ.
		for _, f := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", reply.PID, f))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte(secret)) {
				t.Errorf("secret in the supervisor's /proc/%d/%s", reply.PID, f)
			}
		}
	}
	tk.touch(t, "go")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("status %+v", st)
	}

	got := map[string]string{}
	for _, line := range strings.Split(tk.readFile(t, filepath.Join(taskfiles.DirOutput, "env.txt")), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"API_KEY":                secret,
		"WRAPPER_TEST_OVERRIDE":  "from-stdin",
		"WRAPPER_TEST_INHERITED": "from-wrapper",
		"DISPATCH_PROJECT":       "demo",
		"DISPATCH_TASK":          "T1",
		"DISPATCH_ATTEMPT":       "1",
		"DISPATCH_NODE":          "node-a",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("tool env %s = %q, want %q", k, got[k], v)
		}
	}
	if pwd, want := got["PWD"], filepath.Join(tk.dir, taskfiles.DirOutput); pwd != want {
		t.Errorf("tool env PWD = %q, want %q", pwd, want)
	}

	// Only the file the tool itself wrote may hold the secret.
	err = filepath.WalkDir(tk.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, filepath.Join(taskfiles.DirOutput, "env.txt")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("secret written to %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestToolKilledBySignal(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("sleep 30")})
	tk.run(t, "")
	st := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 0 })
	if err := syscall.Kill(st.ToolPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st = tk.waitFinal(t)
	if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassCrash || st.Signal != "SIGKILL" || st.Error != "killed by SIGKILL" || st.ExitCode != -1 {
		t.Errorf("status %+v; want failed/crash by SIGKILL", st)
	}
}

// TestSupervisorKilled covers a supervisor killed with SIGKILL: status.json
// stays running, `status` reports it dead, and both a retry and `kill` deal
// with the tool it left behind.
func TestSupervisorKilled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		recover func(t *testing.T, tk *testTask) *wire.Status
		want    string
	}{
		{"retry", func(t *testing.T, tk *testTask) *wire.Status {
			tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1, Command: shell("echo two")})
			tk.run(t, "")
			return tk.waitFinal(t)
		}, wire.StatusCompleted},
		{"kill", func(t *testing.T, tk *testTask) *wire.Status {
			out, code := runWrapper(t, "", "kill", "--dir", tk.dir)
			var st wire.Status
			if err := json.Unmarshal(out, &st); err != nil || code != 0 {
				t.Fatalf("kill: exit %d, %s", code, out)
			}
			if st.ErrorClass != wire.ClassKilled {
				t.Errorf("kill printed %+v", st)
			}
			if st.TokensIn != 9 || st.TokensOut != 4 {
				t.Errorf("kill recorded tokens %d/%d, want the 9/4 the tool printed", st.TokensIn, st.TokensOut)
			}
			return tk.status(t)
		}, wire.StatusKilled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The shell waits for a background sleep: on Linux the shell, the
			// supervisor's child, dies with the supervisor; the sleep in its
			// group lives on.
			tk := newTask(t, "", wire.Launch{Agent: wire.AgentCodex, Command: shell(`echo '{"type":"token_count","input_tokens":9,"output_tokens":4}'; sleep 30 & wait`)})
			reply := tk.run(t, "")
			old := tk.waitStatus(t, "tool_pid and output", func(st *wire.Status) bool { return st.ToolPID > 0 && st.LogBytes > 0 })
			if err := syscall.Kill(reply.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var ts wire.TaskStatus
			wtest.Poll(t, 10*time.Second, "status to report the supervisor dead", func() bool {
				ns := nodeStatusOf(t, tk.root)
				if len(ns.Tasks) != 1 {
					t.Fatalf("tasks %+v", ns.Tasks)
				}
				ts = ns.Tasks[0]
				return !ts.Alive
			})
			if ts.Status == nil || ts.Status.Status != wire.StatusRunning {
				t.Fatalf("status after supervisor crash %+v, want running", ts.Status)
			}
			if !proc.GroupAlive(old.ToolPID) {
				t.Fatal("the tool died with its supervisor; the test proves nothing")
			}

			st := tc.recover(t, tk)
			if st.Status != tc.want {
				t.Errorf("status %+v, want %s", st, tc.want)
			}
			wtest.Poll(t, 5*time.Second, "the old tool group to die", func() bool { return !proc.GroupAlive(old.ToolPID) })
		})
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     string
		grace      float64
		wantSignal string
		minTime    time.Duration
		maxTime    time.Duration
		wantLog    string
	}{
		{"ignores TERM", `trap 'echo got-term' TERM; while :; do sleep 0.05; done`, 0.4, "SIGKILL", 700 * time.Millisecond, 10 * time.Second, "got-term"},
		{"obeys TERM", `sleep 30`, 10, "SIGTERM", 300 * time.Millisecond, 5 * time.Second, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Command: shell(tc.script), TimeoutSeconds: 0.3, GraceSeconds: tc.grace})
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassTimeout || st.Signal != tc.wantSignal || st.Error != "timed out after 300ms" {
				t.Errorf("status %+v; want failed/timeout by %s", st, tc.wantSignal)
			}
			took := parseTime(t, st.CompletedAt).Sub(parseTime(t, st.StartedAt))
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("attempt took %s, want between %s and %s", took, tc.minTime, tc.maxTime)
			}
			if log := tk.readFile(t, taskfiles.FileLog); !strings.Contains(log, tc.wantLog) {
				t.Errorf("task.log %q lacks %q", log, tc.wantLog)
			}
		})
	}
}

// manyLines is what the log tests' tool prints, built the same way in Go.
const manyLinesScript = `i=0; while [ $i -lt 3000 ]; do echo "line $i ........................................"; i=$((i+1)); done; echo THE-END`

func manyLines() string {
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "line %d ........................................\n", i)
	}
	b.WriteString("THE-END\n")
	return b.String()
}

func TestLogCap(t *testing.T) {
	t.Parallel()
	const limit = 8192
	tk := newTask(t, "", wire.Launch{Command: shell(manyLinesScript), LogLimitBytes: limit})
	tk.run(t, "")
	st := tk.waitFinal(t)
	want := manyLines()
	if st.Status != wire.StatusCompleted || st.LogBytes != int64(len(want)) {
		t.Fatalf("status %+v; want completed with log_bytes %d", st, len(want))
	}
	log := tk.readFile(t, taskfiles.FileLog)
	if len(log) > limit {
		t.Errorf("task.log has %d bytes, limit %d", len(log), limit)
	}
	cut, hdr := taskfiles.ParseCutMarker([]byte(log))
	if hdr == 0 {
		t.Fatalf("task.log does not start with a cut marker: %.80q", log)
	}
	if rest := log[hdr:]; int(cut)+len(rest) != len(want) || rest != want[cut:] {
		t.Errorf("task.log after the marker is not the last %d bytes of the output (cut %d of %d)", len(rest), cut, len(want))
	}
	if !strings.HasSuffix(log, "line 2999 ........................................\nTHE-END\n") {
		t.Errorf("task.log does not end with the real tail: %q", log[max(0, len(log)-100):])
	}
}

func TestStatusAtomic(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{
		HeartbeatSeconds: 0.01,
		Command:          shell(`i=0; while [ $i -lt 60 ]; do echo "tick $i"; sleep 0.01; i=$((i+1)); done`),
	})
	tk.run(t, "")
	reads := 0
	sizes := map[int64]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for {
		data, err := os.ReadFile(tk.path(taskfiles.FileStatus))
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		var st wire.Status
		if err := json.Unmarshal(data, &st); err != nil || st.Status == "" {
			t.Fatalf("read %d: status.json %q does not parse: %v", reads, data, err)
		}
		reads++
		sizes[st.LogBytes] = true
		if st.Final() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no final status")
		}
	}
	// Readers must have raced real rewrites for the test to mean anything.
	if reads < 100 || len(sizes) < 3 {
		t.Logf("wrapper.log: %s", tk.readFile(t, taskfiles.FileWrapper))
		t.Errorf("only %d reads seeing %d log_bytes values", reads, len(sizes))
	}
	tk.waitFinal(t)
}

func TestDoubleStart(t *testing.T) {
	t.Parallel()
	t.Run("sequential", func(t *testing.T) {
		t.Parallel()
		tk := newTask(t, "", wire.Launch{Command: shell("sleep 30")})
		first := tk.run(t, "")
		out, code := runWrapper(t, "", "run", "--dir", tk.dir)
		wantError(t, out, code, wire.KindAlreadyRunning)
		if st := tk.status(t); st.PID != first.PID || st.Status != wire.StatusRunning || !tk.alive(t) {
			t.Errorf("the refused run disturbed the first: %+v", st)
		}
		out, code = runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "0")
		if code != 0 {
			t.Fatalf("kill: %s", out)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		for i := range 3 {
			tk := newTask(t, "", wire.Launch{Task: fmt.Sprintf("C%d", i), Command: shell("sleep 30")})
			var wg sync.WaitGroup
			outs := make([][]byte, 2)
			codes := make([]int, 2)
			errs := make([]error, 2)
			for j := range 2 {
				wg.Go(func() {
					outs[j], _, codes[j], errs[j] = execWrapper(t.Context(), "", nil, "run", "--dir", tk.dir)
				})
			}
			wg.Wait()
			started, refused := 0, 0
			for j := range 2 {
				if errs[j] != nil {
					t.Fatal(errs[j])
				}
				var er wire.ErrorReply
				switch {
				case codes[j] == 0:
					started++
				case json.Unmarshal(outs[j], &er) == nil && er.Kind == wire.KindAlreadyRunning:
					refused++
				default:
					t.Errorf("run %d: exit %d: %s", j, codes[j], outs[j])
				}
			}
			if started != 1 || refused != 1 {
				t.Fatalf("%d runs started and %d were refused; want one of each", started, refused)
			}
			if _, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirAttempts)); err == nil {
				t.Errorf("the refused run moved the live attempt aside")
			}
			if out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "0"); code != 0 {
				t.Fatalf("kill: %s", out)
			}
		}
	})
}

func TestDetach(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell(waitForGo + "echo done > done.txt")})
	cmd := exec.CommandContext(t.Context(), wrapperBin, "run", "--dir", tk.dir)
	cmd.Stdin = strings.NewReader("")
	// Buffers make exec wait for EOF on both pipes: a supervisor holding our
	// stdout or stderr would keep Run from returning until the tool ends.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- cmd.Run() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v: %s %s", err, stdout.Bytes(), stderr.Bytes())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return while the tool runs")
	}
	var reply wire.RunReply
	if err := json.Unmarshal(stdout.Bytes(), &reply); err != nil {
		t.Fatal(err)
	}
	tk.waitStarted(t, reply.Attempt)
	if st := tk.status(t); st.Status != wire.StatusRunning || !tk.alive(t) {
		t.Fatalf("after run returned: status %+v, alive %v", st, tk.alive(t))
	}
	if runtime.GOOS == "linux" {
		if sid := sessionOf(t, reply.PID); sid != reply.PID {
			t.Errorf("supervisor %d is in session %d, want its own", reply.PID, sid)
		}
	}
	tk.touch(t, "go")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Errorf("status %+v", st)
	}
	if got := tk.readFile(t, filepath.Join(taskfiles.DirOutput, "done.txt")); got != "done\n" {
		t.Errorf("done.txt = %q", got)
	}
}

// sessionOf reads a process's session id from /proc/<pid>/stat.
func sessionOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	sid, err := strconv.Atoi(fields[3])
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{HeartbeatSeconds: 0.05, Command: shell(waitForGo)})
	tk.run(t, "")
	var seen []string
	wtest.Poll(t, 10*time.Second, "three different heartbeats", func() bool {
		hb := strings.TrimSpace(tk.readFile(t, taskfiles.FileHeartbeat))
		if len(seen) == 0 || seen[len(seen)-1] != hb {
			seen = append(seen, hb)
		}
		return len(seen) >= 3
	})
	lastSeq, lastNano := 0, int64(0)
	for _, hb := range seen {
		var seq int
		var nano int64
		if _, err := fmt.Sscanf(hb, "%d %d", &seq, &nano); err != nil {
			t.Fatalf("heartbeat %q: %v", hb, err)
		}
		if seq <= lastSeq || nano < lastNano {
			t.Errorf("heartbeats %q do not move forward", seen)
		}
		lastSeq, lastNano = seq, nano
	}
	tk.touch(t, "go")
	tk.waitFinal(t)
}

func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		launch      wire.Launch
		wantStatus  string
		wantClass   string
		wantError   string // a prefix
		wantLog     string
		wantNoFile  string // in output/
		wantMissing bool
	}{
		{
			name:       "setup fails",
			launch:     wire.Launch{Setup: "echo preparing; echo 'boom: no such package' >&2; exit 1", Command: shell("echo ran > ran.txt")},
			wantStatus: wire.StatusFailed, wantClass: wire.ClassStart,
			wantError:  "setup failed: exit status 1: boom: no such package",
			wantLog:    "preparing\nboom: no such package\ndispatch-wrapper: setup failed: exit status 1: boom: no such package\n",
			wantNoFile: "ran.txt",
		},
		{
			name:       "setup runs first",
			launch:     wire.Launch{Setup: "echo ready > setup.txt", Command: shell("cat setup.txt")},
			wantStatus: wire.StatusCompleted,
			wantLog:    "ready\n",
		},
		{
			name:       "command not found",
			launch:     wire.Launch{Command: []string{"no-such-tool-for-dispatch-tests"}},
			wantStatus: wire.StatusFailed, wantClass: wire.ClassStart,
			wantError:   "start tool: no-such-tool-for-dispatch-tests: executable file not found",
			wantMissing: true,
			// The log the report points to says why nothing ran.
			wantLog: "dispatch-wrapper: start tool: no-such-tool-for-dispatch-tests: executable file not found in $PATH; fix: install it on node local (in the PATH of the node user's non-interactive shell, or in the api_mode's PATH), or give the task or the node another tool\n",
		},
		{
			name:       "spec on stdin and in args",
			launch:     wire.Launch{Stdin: "spec", Command: []string{"sh", "-c", `cat; cat "$1"`, "sh", "{spec}"}},
			wantStatus: wire.StatusCompleted,
			wantLog:    "# spec\nDo the thing.\n# spec\nDo the thing.\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", tc.launch)
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != tc.wantStatus || st.ErrorClass != tc.wantClass || !strings.HasPrefix(st.Error, tc.wantError) {
				t.Errorf("status %+v; want %s, class %q, error %q...", st, tc.wantStatus, tc.wantClass, tc.wantError)
			}
			if st.ToolMissing != tc.wantMissing {
				t.Errorf("tool_missing = %v, want %v", st.ToolMissing, tc.wantMissing)
			}
			if log := tk.readFile(t, taskfiles.FileLog); log != tc.wantLog {
				t.Errorf("task.log = %q, want %q", log, tc.wantLog)
			}
			if tc.wantNoFile != "" {
				if _, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, tc.wantNoFile)); err == nil {
					t.Errorf("the tool ran after a failed setup")
				}
			}
		})
	}
}

func TestAttemptMovedAside(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("echo one > out.txt; echo one")})
	tk.run(t, "")
	first := tk.waitFinal(t)
	tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1, Command: shell("echo two")})
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted || st.Attempt != 2 {
		t.Fatalf("attempt 2: %+v", st)
	}
	if got := tk.readFile(t, taskfiles.FileLog); got != "two\n" {
		t.Errorf("task.log = %q", got)
	}
	if _, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "out.txt")); err == nil {
		t.Errorf("attempt 1's output is still in output/")
	}
	old := filepath.Join(taskfiles.DirAttempts, "1")
	for name, want := range map[string]string{
		taskfiles.FileLog: "one\n",
		filepath.Join(taskfiles.DirOutput, "out.txt"): "one\n",
		taskfiles.FilePID: strconv.Itoa(first.PID) + "\n",
	} {
		if got := tk.readFile(t, filepath.Join(old, name)); got != want {
			t.Errorf("%s = %q, want %q", filepath.Join(old, name), got, want)
		}
	}
	var st wire.Status
	if err := json.Unmarshal([]byte(tk.readFile(t, filepath.Join(old, taskfiles.FileStatus))), &st); err != nil || st != *first {
		t.Errorf("attempts/1/status.json = %+v (%v), want %+v", st, err, first)
	}
	if tk.readFile(t, filepath.Join(old, taskfiles.FileHeartbeat)) == "" {
		t.Error("attempts/1/heartbeat is empty")
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     string
		grace      string
		wantSignal string
		minTime    time.Duration
	}{
		{"obeys TERM", "sleep 30", "5s", "SIGTERM", 0},
		{"ignores TERM", `trap "" TERM; touch trapped; while :; do sleep 0.05; done`, "0.3s", "SIGKILL", 300 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// launch.json's grace is long: only --grace can make kill quick.
			tk := newTask(t, "", wire.Launch{Command: shell(tc.script), GraceSeconds: 60})
			tk.run(t, "")
			tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 0 })
			if strings.Contains(tc.script, "touch trapped") {
				// A TERM sent before the shell has run its trap kills it.
				wtest.Poll(t, 10*time.Second, "the trap to be set", func() bool {
					_, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "trapped"))
					return err == nil
				})
			}
			start := time.Now()
			out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", tc.grace)
			took := time.Since(start)
			var st wire.Status
			if err := json.Unmarshal(out, &st); err != nil || code != 0 {
				t.Fatalf("kill: exit %d, %s", code, out)
			}
			if st.Status != wire.StatusKilled || st.ErrorClass != wire.ClassKilled || st.Signal != tc.wantSignal {
				t.Errorf("kill printed %+v; want killed by %s", st, tc.wantSignal)
			}
			if took < tc.minTime || took > 10*time.Second {
				t.Errorf("kill took %s", took)
			}
			if *tk.status(t) != st {
				t.Errorf("status.json %+v differs from what kill printed", tk.status(t))
			}
			if tk.alive(t) {
				t.Error("supervisor still alive after kill returned")
			}
			// Killing a finished attempt reports it again.
			out2, code := runWrapper(t, "", "kill", "--dir", tk.dir)
			if code != 0 || !bytes.Equal(out2, out) {
				t.Errorf("second kill: exit %d, %s", code, out2)
			}
		})
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	t.Run("whole log", func(t *testing.T) {
		t.Parallel()
		tk := newTask(t, "", wire.Launch{Command: shell("echo a; echo b >&2; echo c")})
		tk.run(t, "")
		tk.waitFinal(t)
		out, code := runWrapper(t, "", "tail", "--dir", tk.dir)
		if code != 0 || string(out) != "a\nb\nc\n" {
			t.Errorf("tail: exit %d, %q", code, out)
		}
		out, code = runWrapper(t, "", "tail", "--dir", tk.dir, "--from", "2")
		if code != 0 || string(out) != "b\nc\n" {
			t.Errorf("tail --from 2: exit %d, %q", code, out)
		}
		out, _ = runWrapper(t, "", "tail", "--dir", tk.dir, "--from", "6")
		if len(out) != 0 {
			t.Errorf("tail --from the end: %q", out)
		}
	})
	t.Run("follow", func(t *testing.T) {
		t.Parallel()
		tk := newTask(t, "", wire.Launch{Command: shell(`echo start; ` + waitForGo + `for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.1; done`)})
		tk.run(t, "")
		out := followTail(t, tk, func() {
			wtest.Poll(t, 5*time.Second, "start in the log", func() bool { return tk.readFile(t, taskfiles.FileLog) != "" })
		})
		if want := "start\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\n"; out != want {
			t.Errorf("tail --follow = %q, want %q", out, want)
		}
	})
	t.Run("follow across cuts", func(t *testing.T) {
		t.Parallel()
		// Bursts far larger than the limit, with pauses longer than the
		// follower's poll, so that it meets several rewrites mid-stream.
		script := strings.Replace(manyLinesScript, "do echo", `do [ $((i % 500)) -eq 0 ] && sleep 0.3; echo`, 1)
		tk := newTask(t, "", wire.Launch{Command: shell(waitForGo + script), LogLimitBytes: 4096})
		tk.run(t, "")
		out := followTail(t, tk, nil)
		// Replay the output: each marker must account exactly for the bytes
		// the follower could not print, and everything else must be the
		// tool's output in order.
		want := manyLines()
		marker := regexp.MustCompile(`\[dispatch: (\d+) bytes cut\]\n`)
		pos, last := 0, 0
		check := func(text string) {
			if !strings.HasPrefix(want[pos:], text) {
				i := 0
				for i < len(text) && pos+i < len(want) && text[i] == want[pos+i] {
					i++
				}
				t.Fatalf("tail printed %d bytes for output offset %d; they differ at output offset %d: %.40q, want %.40q",
					len(text), pos, pos+i, text[i:], want[min(pos+i, len(want)):])
			}
			pos += len(text)
		}
		for _, m := range marker.FindAllStringSubmatchIndex(out, -1) {
			check(out[last:m[0]])
			n, _ := strconv.Atoi(out[m[2]:m[3]])
			pos += n
			last = m[1]
		}
		if n := len(marker.FindAllStringIndex(out, -1)); n < 2 {
			t.Errorf("tail printed %d cut markers; the follower never met a rewrite mid-stream", n)
		}
		check(out[last:])
		if pos != len(want) {
			t.Errorf("tail accounted for %d bytes of %d", pos, len(want))
		}
	})
}

// followTail starts `tail --follow`, calls before (if any), lets the tool
// go and returns everything tail printed once it exits by itself.
func followTail(t *testing.T, tk *testTask, before func()) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), wrapperBin, "tail", "--dir", tk.dir, "--follow")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if before != nil {
		before()
	}
	tk.touch(t, "go")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail --follow: %v", err)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("tail --follow did not stop after the attempt ended")
	}
	if st := tk.status(t); !st.Final() {
		t.Errorf("tail --follow returned while the attempt is %s", st.Status)
	}
	return out.String()
}

// nodeStatusOf runs `status` and decodes its reply.
func nodeStatusOf(t *testing.T, root string, args ...string) wire.NodeStatus {
	t.Helper()
	out, code := runWrapper(t, "", append([]string{"status", "--root", root}, args...)...)
	var ns wire.NodeStatus
	if err := json.Unmarshal(out, &ns); err != nil || code != 0 {
		t.Fatalf("status: exit %d, %s", code, out)
	}
	return ns
}

func TestStatus(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	live := newTask(t, root, wire.Launch{Project: "p1", Task: "A", Command: shell(waitForGo)})
	corrupt := newTask(t, root, wire.Launch{Project: "p1", Task: "B"})
	if err := os.WriteFile(corrupt.path(taskfiles.FileStatus), []byte(`{"task":"B","status":"runn`), 0o644); err != nil {
		t.Fatal(err)
	}
	done := newTask(t, root, wire.Launch{Project: "p2", Task: "C"})
	final := wire.Status{Task: "C", Attempt: 1, Status: wire.StatusCompleted, StartedAt: "2026-01-02T15:04:05.123Z"}
	if err := taskfiles.WriteJSONAtomic(done.path(taskfiles.FileStatus), final); err != nil {
		t.Fatal(err)
	}
	newTask(t, root, wire.Launch{Project: "p2", Task: "D"})
	for _, p := range []string{filepath.Join(root, ".bin", "tasks", "X"), filepath.Join(root, "p2", "tasks", ".hidden")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "p2", "tasks", "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	live.run(t, "")

	tests := []struct {
		name string
		root string
		args []string
		want []string // project/task, in order
	}{
		{"all projects", root, nil, []string{"p1/A", "p1/B", "p2/C", "p2/D"}},
		{"one project", root, []string{"--project", "p2"}, []string{"p2/C", "p2/D"}},
		{"two projects", root, []string{"--project", "p2", "--project", "p1"}, []string{"p1/A", "p1/B", "p2/C", "p2/D"}},
		{"unknown project", root, []string{"--project", "nosuch"}, nil},
		{"missing root", filepath.Join(root, "nosuch"), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runWrapper(t, "", append([]string{"status", "--root", tc.root}, tc.args...)...)
			if code != 0 {
				t.Fatalf("status: exit %d, %s", code, out)
			}
			if !bytes.Contains(out, []byte(`"tasks":[`)) {
				t.Errorf("tasks is not a list: %s", out)
			}
			var ns wire.NodeStatus
			if err := json.Unmarshal(out, &ns); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ts := range ns.Tasks {
				got = append(got, ts.Project+"/"+ts.Task)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("tasks %v, want %v", got, tc.want)
			}
			if ns.WrapperVersion != "dev" || ns.Facts.OS != runtime.GOOS || ns.Facts.Arch != runtime.GOARCH {
				t.Errorf("node fields %+v", ns)
			}
			if ns.Facts.DiskFreeBytes <= 0 || ns.Facts.MemAvailableBytes <= 0 || ns.Facts.Load1 < 0 {
				t.Errorf("facts %+v", ns.Facts)
			}
		})
	}

	ns := nodeStatusOf(t, root)
	byName := map[string]wire.TaskStatus{}
	for _, ts := range ns.Tasks {
		byName[ts.Task] = ts
	}
	if a := byName["A"]; !a.Alive || a.Status == nil || a.Status.Status != wire.StatusRunning || a.Dir != live.dir || a.StatusError != "" || a.Heartbeat == "" {
		t.Errorf("live task %+v", a)
	}
	if b := byName["B"]; b.Alive || b.Status != nil || b.StatusError == "" {
		t.Errorf("corrupt task %+v", b)
	}
	if c := byName["C"]; c.Alive || c.Status == nil || *c.Status != final {
		t.Errorf("finished task %+v", c)
	}
	if d := byName["D"]; d.Alive || d.Status != nil || d.StatusError != "status.json missing" {
		t.Errorf("task never run %+v", d)
	}
	out, _ := runWrapper(t, "", "status", "--root", root, "--project", "p1")
	if !bytes.Contains(out, []byte(`"status":null`)) {
		t.Errorf("a corrupt status.json is not reported as null: %s", out)
	}
	live.touch(t, "go")
	live.waitFinal(t)
}

// TestAttemptsLinkIsNotFollowed: a task that replaced attempts/ with a
// symbolic link to a directory outside its task directory does not make the
// next attempt's supervisor move the earlier attempt's files out there.
func TestAttemptsLinkIsNotFollowed(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	tk := newTask(t, "", wire.Launch{Command: shell("echo one > out.txt; ln -s " + outside + " ../" + taskfiles.DirAttempts)})
	tk.run(t, "")
	tk.waitFinal(t)
	tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1, Command: shell("echo two")})
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted || st.Attempt != 2 {
		t.Fatalf("attempt 2: %+v", st)
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("the supervisor wrote through the task's link: %s holds %v", outside, entries)
	}
	if got := tk.readFile(t, filepath.Join(taskfiles.DirAttempts, "1", taskfiles.DirOutput, "out.txt")); got != "one\n" {
		t.Errorf("attempts/1/output/out.txt = %q, want the first attempt's", got)
	}
}

// TestHeartbeatSaysHowLongTheToolWasQuiet: with a stall watch, the
// heartbeat's third field is how long the tool had written nothing: it
// stays short while the tool prints and grows once it is silent, which is
// what the dashboard's stall countdown counts from.
func TestHeartbeatSaysHowLongTheToolWasQuiet(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{HeartbeatSeconds: 0.05, StallSeconds: 60,
		Command: shell("i=0; while [ $i -lt 30 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done; touch quiet; " + waitForGo)})
	tk.run(t, "")
	quiet := func() time.Duration {
		q, ok := heartbeatQuiet(tk.readFile(t, taskfiles.FileHeartbeat))
		if !ok {
			t.Fatalf("heartbeat %q says nothing of the quiet time", tk.readFile(t, taskfiles.FileHeartbeat))
		}
		return q
	}
	var most time.Duration
	samples := 0
	wtest.Poll(t, 20*time.Second, "the tool to print its 30 lines", func() bool {
		if _, err := os.Stat(tk.path(filepath.Join(taskfiles.DirOutput, "quiet"))); err == nil {
			return true
		}
		if q, ok := heartbeatQuiet(tk.readFile(t, taskfiles.FileHeartbeat)); ok {
			most, samples = max(most, q), samples+1
		}
		return false
	})
	if samples == 0 || most > time.Second {
		t.Fatalf("the tool printed every 50ms, yet the heartbeat said it was quiet for up to %s (%d samples)", most, samples)
	}
	wtest.Poll(t, 20*time.Second, "the quiet time to grow past 1.5s once the tool is silent", func() bool { return quiet() > 1500*time.Millisecond })
	tk.touch(t, "go")
	tk.waitFinal(t)
}

// heartbeatQuiet is the heartbeat's quiet time, its third field (the
// controller's side reads it with domain.HeartbeatQuiet).
func heartbeatQuiet(hb string) (time.Duration, bool) {
	f := strings.Fields(hb)
	if len(f) != 3 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	return time.Duration(n), err == nil
}
