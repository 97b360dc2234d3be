package wrapper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/kill"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestOneSupervisorPerBatch: the attempts of one launch share one
// supervisor process. `kill` stops the attempt it names and no other, a
// kill request left for an earlier attempt stops nothing, each attempt
// lets go of its task's lock as it ends, and SIGTERM to the supervisor
// stops every attempt it still runs.
func TestOneSupervisorPerBatch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const waitGo = `touch started; while [ ! -e go ]; do sleep 0.05; done`
	tasks := map[string]*testTask{}
	var items []wire.LaunchItem
	for _, id := range []string{"T1", "T2", "T3"} {
		tk := &testTask{root: root, project: "demo", name: id, dir: filepath.Join(root, "demo", "tasks", id)}
		t.Cleanup(func() { tk.cleanup(t) })
		tasks[id] = tk
		items = append(items, wire.LaunchItem{Dir: tk.dir, Spec: "# " + id + "\n", Launch: wire.Launch{Project: "demo", Task: id,
			Attempt: 1, Node: "local", Command: shell(waitGo), HeartbeatSeconds: 0.1, TimeoutSeconds: 60}})
	}
	doc, err := json.Marshal(wire.LaunchBatch{Launches: items})
	if err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, string(doc), "launch")
	var reply wire.LaunchReply
	if code != 0 || json.Unmarshal(out, &reply) != nil || len(reply.Results) != 3 {
		t.Fatalf("launch: exit %d: %s", code, out)
	}
	pid := 0
	for i, r := range reply.Results {
		if r.Run == nil || r.Dir != items[i].Dir {
			t.Fatalf("attempt %d: %+v, want started", i, r)
		}
		if pid == 0 {
			pid = r.Run.PID
		}
		if r.Run.PID != pid {
			t.Errorf("attempt %d runs under supervisor %d, attempt 0 under %d: want one supervisor", i, r.Run.PID, pid)
		}
	}
	for id, tk := range tasks {
		wtest.Poll(t, 15*time.Second, id+" to start", func() bool {
			_, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "started"))
			return err == nil
		})
		if st := tk.status(t); st.PID != pid || st.Status != wire.StatusRunning {
			t.Fatalf("%s: %+v, want running under %d", id, st, pid)
		}
	}

	// A request left for attempt 0 of T3 (an earlier attempt) must not
	// stop attempt 1 when the supervisor looks for requests.
	if err := kill.WriteRequest(tasks["T3"].dir, kill.Request{Attempt: 0, GraceSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	out, code = runWrapper(t, "", "kill", "--dir", tasks["T1"].dir, "--grace", "1s")
	var st wire.Status
	if err := json.Unmarshal(out, &st); err != nil || code != 0 || st.Status != wire.StatusKilled {
		t.Fatalf("kill T1: exit %d: %s", code, out)
	}
	if tasks["T1"].alive(t) {
		t.Error("T1's lock is still held after its attempt ended")
	}
	for _, id := range []string{"T2", "T3"} {
		if st := tasks[id].status(t); st.Final() || !tasks[id].alive(t) {
			t.Fatalf("%s after the kill of T1: %+v, want still running", id, st)
		}
	}

	tasks["T2"].touch(t, "go")
	if st := tasks["T2"].waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("T2: %+v, want completed", st)
	}
	if st := tasks["T3"].status(t); st.Final() {
		t.Fatalf("T3 after T2 ended: %+v, want still running", st)
	}

	// SIGTERM (a shutdown, an operator's kill) stops what is left.
	rec, err := tasks["T3"].record()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.SignalSupervisor(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := tasks["T3"].waitFinal(t); st.Status != wire.StatusKilled {
		t.Fatalf("T3 after SIGTERM: %+v, want killed", st)
	}
	wtest.Poll(t, 5*time.Second, "the supervisor to exit", func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
}

// TestLaunchRefusesADirectoryTwice: a batch naming one task directory twice
// starts it once and refuses the second, whose files are not written.
func TestLaunchRefusesADirectoryTwice(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tk := &testTask{root: root, project: "demo", name: "T1", dir: filepath.Join(root, "demo", "tasks", "T1")}
	t.Cleanup(func() { tk.cleanup(t) })
	l := wire.Launch{Project: "demo", Task: "T1", Attempt: 1, Node: "local", Command: shell("cat > seen.txt"),
		Stdin: "spec", HeartbeatSeconds: 0.1, TimeoutSeconds: 20}
	doc, err := json.Marshal(wire.LaunchBatch{Launches: []wire.LaunchItem{
		{Dir: tk.dir, Spec: "first\n", Launch: l},
		{Dir: tk.dir, Spec: "second\n", Launch: l},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, string(doc), "launch")
	var reply wire.LaunchReply
	if code != 0 || json.Unmarshal(out, &reply) != nil || len(reply.Results) != 2 {
		t.Fatalf("launch: exit %d: %s", code, out)
	}
	if r := reply.Results; r[0].Run == nil || r[1].Run != nil || r[1].Kind != wire.KindUsage {
		t.Fatalf("results %+v, want the first started and the second refused", r)
	}
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("T1: %+v", st)
	}
	if got := tk.readFile(t, "output/seen.txt"); got != "first\n" {
		t.Errorf("the tool read %q, want the first spec", got)
	}
}
