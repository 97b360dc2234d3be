package wrapper

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestRunServe: `run --serve` answers one launch document a line, one
// reply a line, on one process: each document's attempts start and end;
// the server holds no task's lock once it replied (a second attempt of a
// task whose first ended starts, a task whose supervisor lives is
// already_running); the supervisors that ended are reaped while the
// server lives (no zombie child); stdin's end ends it.
func TestRunServe(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	first := newTask(t, root, wire.Launch{Task: "T1", Command: shell("echo one")})
	slow := newTask(t, root, wire.Launch{Task: "T2", Command: shell("exec sleep 30")})
	cmd := exec.Command(wrapperBin, "run", "--serve")
	stdin, lines := startPiped(t, cmd)
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	call := func(l wire.Launch, tks ...*testTask) wire.LaunchReply {
		t.Helper()
		var batch wire.LaunchBatch
		for _, tk := range tks {
			l.Project, l.Task, l.Node, l.HeartbeatSeconds, l.TimeoutSeconds = tk.project, tk.name, "local", 0.1, 20
			if l.Command == nil {
				l.Command = shell("echo " + tk.name)
			}
			batch.Launches = append(batch.Launches, wire.LaunchItem{Dir: tk.dir, Spec: "# spec\n", Launch: l})
		}
		doc, err := json.Marshal(batch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(doc, '\n')); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no reply line: %v", lines.Err())
		}
		var r wire.LaunchReply
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil || len(r.Results) != len(tks) {
			t.Fatalf("reply %q: %v", lines.Bytes(), err)
		}
		return r
	}
	r := call(wire.Launch{Attempt: 1}, first)
	if r.Results[0].Run == nil || r.Results[0].Run.PID <= 0 {
		t.Fatalf("first document: %+v", r.Results[0])
	}
	if st := first.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("first attempt: %+v", st)
	}
	r = call(wire.Launch{Attempt: 1, Command: shell("exec sleep 30")}, slow)
	if r.Results[0].Run == nil {
		t.Fatalf("second document: %+v", r.Results[0])
	}
	// The server kept no lock: the first task's next attempt starts.
	r = call(wire.Launch{Attempt: 2}, first)
	if r.Results[0].Run == nil {
		t.Fatalf("attempt 2 of a task whose attempt 1 ended: %+v", r.Results[0])
	}
	st := first.waitStatus(t, "attempt 2's end", func(st *wire.Status) bool { return st.Attempt == 2 && st.Final() })
	if st.Status != wire.StatusCompleted {
		t.Fatalf("attempt 2: %+v", st)
	}
	wtest.Poll(t, 5*time.Second, "attempt 2's supervisor to exit", func() bool { return !first.alive(t) })
	// A supervisor that lives holds its task.
	r = call(wire.Launch{Attempt: 1, Command: shell("exec sleep 30")}, slow)
	if r.Results[0].Kind != wire.KindAlreadyRunning {
		t.Errorf("a second launch while the supervisor lives: %+v, want already_running", r.Results[0])
	}
	// The ended supervisors were reaped: no zombie child of the server.
	if z := zombieChildren(t, cmd.Process.Pid); len(z) > 0 {
		t.Errorf("zombie children of run --serve: %v", z)
	}
	if _, err := os.Stat(first.path(taskfiles.FileStatus)); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("run --serve after stdin ended: %v", err)
	}
}

// zombieChildren lists the pids of pid's children that are zombies.
func zombieChildren(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ")".
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 2 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
