package wrapper

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// wrapperBin is the dispatch-wrapper binary built once by TestMain; the
// tests drive it as a subprocess, the way the controller does.
var wrapperBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wrapper tests:", err)
		return 1
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "wrapper tests: the go tool is needed to build dispatch-wrapper:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "dispatch-wrapper-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "wrapper tests:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	wrapperBin = filepath.Join(tmp, "dispatch-wrapper")
	args := []string{"build", "-o", wrapperBin}
	if raceEnabled {
		args = append(args, "-race")
		// By default a race-enabled program sleeps a second on exit, which
		// would make every `run` look slow to return.
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	cmd := exec.Command(goTool, append(args, "./cmd/dispatch-wrapper")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "wrapper tests: build dispatch-wrapper: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot walks up from the test's working directory to go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// execWrapper runs the wrapper binary; it does not touch t so that
// goroutines may call it.
func execWrapper(ctx context.Context, stdin string, env []string, args ...string) (stdout, stderr []byte, code int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, wrapperBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return out.Bytes(), errb.Bytes(), ee.ExitCode(), nil
	}
	if err != nil {
		return out.Bytes(), errb.Bytes(), -1, fmt.Errorf("%s %s: %w (stderr: %s)", wrapperBin, strings.Join(args, " "), err, errb.Bytes())
	}
	return out.Bytes(), errb.Bytes(), 0, nil
}

// runWrapper runs the wrapper and returns its stdout and exit code.
func runWrapper(t *testing.T, stdin string, args ...string) ([]byte, int) {
	t.Helper()
	out, _, code, err := execWrapper(t.Context(), stdin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out, code
}

// wantError checks that out is an ErrorReply of kind and code is 1.
func wantError(t *testing.T, out []byte, code int, kind string) wire.ErrorReply {
	t.Helper()
	var er wire.ErrorReply
	if err := json.Unmarshal(out, &er); err != nil {
		t.Fatalf("stdout %q is not an error reply: %v", out, err)
	}
	if code != 1 || er.Kind != kind || er.Error == "" {
		t.Fatalf("got exit %d, reply %+v; want exit 1, kind %q and a message", code, er, kind)
	}
	return er
}

// testTask is a task directory <root>/<project>/tasks/<task>.
type testTask struct {
	root, project, name, dir string
}

// newTask creates a task directory with a spec and launch.json under root
// (a fresh temporary directory when root is ""). Unset launch fields get
// test-friendly values: a 0.1 s heartbeat and a 20 s timeout.
func newTask(t *testing.T, root string, l wire.Launch) *testTask {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	if l.Project == "" {
		l.Project = "demo"
	}
	if l.Task == "" {
		l.Task = "T1"
	}
	if l.Attempt == 0 {
		l.Attempt = 1
	}
	if l.Node == "" {
		l.Node = "local"
	}
	if l.HeartbeatSeconds == 0 {
		l.HeartbeatSeconds = 0.1
	}
	if l.TimeoutSeconds == 0 {
		l.TimeoutSeconds = 20
	}
	tk := &testTask{root: root, project: l.Project, name: l.Task}
	tk.dir = filepath.Join(root, l.Project, "tasks", l.Task)
	if err := os.MkdirAll(tk.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tk.dir, taskfiles.FileSpec), []byte("# spec\nDo the thing.\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	tk.setLaunch(t, l)
	t.Cleanup(func() { tk.cleanup(t) })
	return tk
}

// shell is a launch command running script with /bin/sh.
func shell(script string) []string {
	return []string{"/bin/sh", "-c", script}
}

func (tk *testTask) setLaunch(t *testing.T, l wire.Launch) {
	t.Helper()
	data, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tk.dir, taskfiles.FileLaunch), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (tk *testTask) path(name string) string { return filepath.Join(tk.dir, name) }

// run starts the attempt, checks the reply and waits for the attempt's
// first status.json (`run` replies before the supervisor writes it).
func (tk *testTask) run(t *testing.T, env string) wire.RunReply {
	t.Helper()
	out, code := runWrapper(t, env, "run", "--dir", tk.dir)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, out)
	}
	var r wire.RunReply
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("run: reply %q: %v", out, err)
	}
	if r.Status != wire.StatusRunning || r.PID <= 0 || r.Task != tk.name {
		t.Fatalf("run: reply %+v", r)
	}
	tk.waitStarted(t, r.Attempt)
	return r
}

// waitStarted waits until status.json is attempt's.
func (tk *testTask) waitStarted(t *testing.T, attempt int) {
	t.Helper()
	tk.waitStatus(t, fmt.Sprintf("attempt %d's first status", attempt), func(st *wire.Status) bool { return st.Attempt == attempt })
}

// status reads status.json, failing the test if it is missing or corrupt.
func (tk *testTask) status(t *testing.T) *wire.Status {
	t.Helper()
	st, err := taskfiles.ReadStatus(tk.dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitStatus polls status.json until cond holds.
func (tk *testTask) waitStatus(t *testing.T, what string, cond func(*wire.Status) bool) *wire.Status {
	t.Helper()
	var st *wire.Status
	wtest.Poll(t, 15*time.Second, what, func() bool {
		var err error
		st, err = taskfiles.ReadStatus(tk.dir)
		return err == nil && cond(st)
	})
	return st
}

// waitFinal waits for the final status and for the supervisor to exit.
func (tk *testTask) waitFinal(t *testing.T) *wire.Status {
	t.Helper()
	st := tk.waitStatus(t, "final status", (*wire.Status).Final)
	wtest.Poll(t, 5*time.Second, "supervisor exit", func() bool { return !tk.alive(t) })
	return st
}

func (tk *testTask) alive(t *testing.T) bool {
	t.Helper()
	alive, err := taskfiles.SupervisorAlive(tk.dir)
	if err != nil {
		t.Fatal(err)
	}
	return alive
}

func (tk *testTask) readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(tk.path(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// touch creates a file in output/, the signal many test tools wait for.
func (tk *testTask) touch(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tk.dir, taskfiles.DirOutput, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cleanup kills whatever a failed test left running and checks that the
// supervisor (race-enabled when the tests are) reported no data race.
func (tk *testTask) cleanup(t *testing.T) {
	// The pids come from the process record: status.json and the pid file
	// may be forged by the test itself.
	if rec, err := tk.record(); err == nil {
		if alive, _ := taskfiles.SupervisorAlive(tk.dir); alive && rec.CheckSupervisor() == nil {
			syscall.Kill(rec.SupervisorPID, syscall.SIGKILL)
		}
		rec.KillToolGroup(syscall.SIGKILL)
	}
	if data, err := os.ReadFile(tk.path(taskfiles.FileWrapper)); err == nil {
		for _, bad := range []string{"DATA RACE", "panic:", "fatal error:"} {
			if bytes.Contains(data, []byte(bad)) {
				t.Errorf("%s reports %q:\n%s", taskfiles.FileWrapper, bad, data)
			}
		}
	}
}

// recordFile is where the wrapper binary keeps the process record of the
// task (the test binary's own os.Executable is elsewhere).
func (tk *testTask) recordFile() string {
	sum := sha256.Sum256([]byte(filepath.Clean(tk.dir)))
	return filepath.Join(filepath.Dir(wrapperBin), proc.CtlDirName, hex.EncodeToString(sum[:])+".json")
}

// record reads the wrapper's process record of the task.
func (tk *testTask) record() (*proc.ProcRecord, error) {
	data, err := os.ReadFile(tk.recordFile())
	if err != nil {
		return nil, err
	}
	var r proc.ProcRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse("2006-01-02T15:04:05.000Z", s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return tm
}

// startPiped starts cmd with pipes to its stdin and from its stdout,
// returned as the stdin and a scanner of stdout's lines.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
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
	return in, bufio.NewScanner(out)
}
