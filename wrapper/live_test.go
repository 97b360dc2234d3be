package wrapper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// liveOf runs `status --live` with the named tasks on stdin.
func liveOf(t *testing.T, root string, named []string, args ...string) wire.NodeStatus {
	t.Helper()
	doc, err := json.Marshal(wire.LiveRequest{Tasks: named})
	if err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, string(doc), append([]string{"status", "--root", root, "--live"}, args...)...)
	var ns wire.NodeStatus
	if err := json.Unmarshal(out, &ns); err != nil || code != 0 {
		t.Fatalf("status --live: exit %d, %s", code, out)
	}
	if ns.Listing != wire.ListingLive {
		t.Errorf("listing %q, want %q", ns.Listing, wire.ListingLive)
	}
	return ns
}

func listed(ns wire.NodeStatus) string {
	var got []string
	for _, ts := range ns.Tasks {
		got = append(got, ts.Project+"/"+ts.Task)
	}
	return strings.Join(got, " ")
}

func markerOf(tk *testTask) string {
	return filepath.Join(filepath.Dir(tk.dir), nodestatus.DirLive, tk.name)
}

// TestLiveIndexFollowsTheAttempt: `run` and `launch` put the attempt in
// the live index (a private file holding its number) before the
// supervisor starts, and the supervisor takes it out once the final
// status is written.
func TestLiveIndexFollowsTheAttempt(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tk := newTask(t, root, wire.Launch{Task: "R1", Attempt: 3, Command: shell(waitForGo)})
	tk.run(t, "")
	data, err := os.ReadFile(markerOf(tk))
	if err != nil || string(data) != "3\n" {
		t.Fatalf("marker after run: %q, %v; want \"3\\n\"", data, err)
	}
	for path, want := range map[string]os.FileMode{markerOf(tk): 0o600, filepath.Dir(markerOf(tk)): 0o700 | os.ModeDir} {
		if fi, err := os.Lstat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}
	if got := listed(liveOf(t, root, nil)); got != "demo/R1" {
		t.Errorf("live listing %q, want demo/R1", got)
	}
	tk.touch(t, "go")
	tk.waitFinal(t)
	if _, err := os.Lstat(markerOf(tk)); !os.IsNotExist(err) {
		t.Errorf("marker after the final status: %v, want it gone", err)
	}

	// The launch path (the controller's).
	dir := filepath.Join(root, "demo", "tasks", "L1")
	l := wire.Launch{Project: "demo", Task: "L1", Attempt: 2, Node: "local", Command: shell(waitForGo), HeartbeatSeconds: 0.1, TimeoutSeconds: 20}
	doc, _ := json.Marshal(wire.LaunchBatch{Launches: []wire.LaunchItem{{Dir: dir, Spec: "# L\n", Launch: l}}})
	out, code := runWrapper(t, string(doc), "launch")
	var reply wire.LaunchReply
	if code != 0 || json.Unmarshal(out, &reply) != nil || len(reply.Results) != 1 || reply.Results[0].Run == nil {
		t.Fatalf("launch: exit %d: %s", code, out)
	}
	lt := &testTask{root: root, project: "demo", name: "L1", dir: dir}
	t.Cleanup(func() { lt.cleanup(t) })
	if data, err := os.ReadFile(markerOf(lt)); err != nil || string(data) != "2\n" {
		t.Fatalf("marker after launch: %q, %v", data, err)
	}
	lt.waitStarted(t, 2)
	lt.touch(t, "go")
	lt.waitFinal(t)
	if _, err := os.Lstat(markerOf(lt)); !os.IsNotExist(err) {
		t.Errorf("marker after the launched attempt ended: %v, want it gone", err)
	}
	if got := listed(liveOf(t, root, nil)); got != "" {
		t.Errorf("live listing with nothing live: %q", got)
	}
}

// TestLiveIndexKeptAfterSupervisorKill: a supervisor killed outright
// leaves its marker, so the live listing still reports the dead attempt
// (running, no supervisor: an orphan); `kill` of the orphan ends it and
// takes it out of the index.
func TestLiveIndexKeptAfterSupervisorKill(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tk := newTask(t, root, wire.Launch{Command: shell(`sleep 30 & wait`)})
	reply := tk.run(t, "")
	tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 0 })
	if err := syscall.Kill(reply.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wtest.Poll(t, 10*time.Second, "the supervisor to die", func() bool { return !tk.alive(t) })
	ns := liveOf(t, root, nil)
	if len(ns.Tasks) != 1 || ns.Tasks[0].Alive || ns.Tasks[0].Status == nil || ns.Tasks[0].Status.Status != wire.StatusRunning {
		t.Fatalf("live listing after the supervisor's death: %+v", ns.Tasks)
	}
	if _, err := os.Lstat(markerOf(tk)); err != nil {
		t.Fatalf("marker after kill -9 of the supervisor: %v", err)
	}
	if out, code := runWrapper(t, "", "kill", "--dir", tk.dir); code != 0 {
		t.Fatalf("kill: exit %d, %s", code, out)
	}
	if _, err := os.Lstat(markerOf(tk)); !os.IsNotExist(err) {
		t.Errorf("marker after the orphan was killed: %v, want it gone", err)
	}
}

// TestStatusLive: `status --live` lists the live index and the named
// tasks, and no other; it cleans markers whose attempt is over; names and
// the stdin document are checked.
func TestStatusLive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	final := func(tk *testTask, attempt int) {
		t.Helper()
		if err := taskfiles.WriteJSONAtomic(tk.path(taskfiles.FileStatus), wire.Status{Task: tk.name, Attempt: attempt, Status: wire.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	mark := func(tk *testTask, attempt int, age time.Duration) {
		t.Helper()
		if err := nodestatus.MarkLive(tk.dir, attempt); err != nil {
			t.Fatal(err)
		}
		if age > 0 {
			old := time.Now().Add(-age)
			if err := os.Chtimes(markerOf(tk), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	running := newTask(t, root, wire.Launch{Project: "p1", Task: "RUN", Command: shell(waitForGo)})
	running.run(t, "")
	for _, id := range []string{"F1", "F2", "F3"} {
		final(newTask(t, root, wire.Launch{Project: "p1", Task: id}), 1)
	}
	over := newTask(t, root, wire.Launch{Project: "p1", Task: "OVER"}) // a marker left by a finished attempt
	final(over, 2)
	mark(over, 2, 0)
	starting := newTask(t, root, wire.Launch{Project: "p1", Task: "START"}) // a launch whose supervisor is coming
	final(starting, 1)
	mark(starting, 2, 0)
	failed := newTask(t, root, wire.Launch{Project: "p1", Task: "NEVER"}) // a launch that never started, long ago
	final(failed, 1)
	mark(failed, 2, time.Hour)
	gone := newTask(t, root, wire.Launch{Project: "p1", Task: "GONE"})
	mark(gone, 1, 0)
	if err := os.RemoveAll(gone.dir); err != nil {
		t.Fatal(err)
	}
	other := newTask(t, root, wire.Launch{Project: "p2", Task: "OTHER", Command: shell(waitForGo)})
	other.run(t, "")
	final(newTask(t, root, wire.Launch{Project: "p2", Task: "F9"}), 1)

	ns := liveOf(t, root, []string{"p1/F2", "p1/NOSUCH", "p2/F9", "p1/RUN"}, "--project", "p1")
	if got, want := listed(ns), "p1/F2 p1/NEVER p1/OVER p1/RUN p1/START p2/F9"; got != want {
		t.Errorf("live listing %q, want %q", got, want)
	}
	for _, tc := range []struct {
		tk   *testTask
		kept bool
	}{{running, true}, {starting, true}, {over, false}, {failed, false}, {gone, false}} {
		_, err := os.Lstat(markerOf(tc.tk))
		if kept := err == nil; kept != tc.kept {
			t.Errorf("marker of %s kept: %v, want %v", tc.tk.name, kept, tc.kept)
		}
	}
	if got, want := listed(liveOf(t, root, nil)), "p1/RUN p1/START p2/OTHER"; got != want {
		t.Errorf("second live listing, all projects: %q, want %q", got, want)
	}
	// Empty stdin names nothing.
	out, code := runWrapper(t, "", "status", "--root", root, "--live", "--project", "p2")
	if var2 := (wire.NodeStatus{}); code != 0 || json.Unmarshal(out, &var2) != nil || listed(var2) != "p2/OTHER" {
		t.Errorf("status --live with empty stdin: exit %d, %s", code, out)
	}

	// An index the task replaced with a file or a link: the whole project.
	root2 := t.TempDir()
	for _, id := range []string{"A", "B"} {
		final(newTask(t, root2, wire.Launch{Project: "p", Task: id}), 1)
	}
	idx := filepath.Join(root2, "p", "tasks", nodestatus.DirLive)
	if err := os.Symlink(t.TempDir(), idx); err != nil {
		t.Fatal(err)
	}
	if got := listed(liveOf(t, root2, nil)); got != "p/A p/B" {
		t.Errorf("live listing with the index a link: %q, want every task", got)
	}
	a := &testTask{root: root2, project: "p", name: "A", dir: filepath.Join(root2, "p", "tasks", "A")}
	if err := nodestatus.MarkLive(a.dir, 2); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(idx); err != nil || !fi.IsDir() {
		t.Errorf("index after markLive over a link: %v, %v; want a directory", fi, err)
	}

	for _, tc := range []struct{ name, stdin string }{
		{"not json", "tasks"},
		{"no slash", `{"tasks":["RUN"]}`},
		{"dot dot", `{"tasks":["p1/.."]}`},
		{"empty project", `{"tasks":["/RUN"]}`},
		{"nested", `{"tasks":["p1/a/b"]}`},
		{"unknown field", `{"task":["p1/RUN"]}`},
		{"not a list", `{"tasks":"p1/RUN"}`},
		{"tags not matching the tasks", `{"tasks":["p1/RUN","p1/F1"],"tags":["x"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runWrapper(t, tc.stdin, "status", "--root", root, "--live")
			wantError(t, out, code, wire.KindUsage)
		})
	}
	running.touch(t, "go")
	other.touch(t, "go")
	running.waitFinal(t)
	other.waitFinal(t)
}

// TestStatusLiveSame: a named task whose entry has the tag the request
// holds for it is answered with its heartbeat alone; one whose entry
// changed since (its status, here) is answered in full, with a new tag.
func TestStatusLiveSame(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var tasks []*testTask
	for _, id := range []string{"A", "B", "C"} {
		tk := newTask(t, root, wire.Launch{Project: "p", Task: id})
		if err := taskfiles.WriteJSONAtomic(tk.path(taskfiles.FileStatus), wire.Status{Task: id, Attempt: 1, Status: wire.StatusRunning}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tk.path(taskfiles.FileHeartbeat), []byte("beat 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	named := []string{"p/A", "p/B", "p/C"}
	first := liveOf(t, root, named)
	if listed(first) != "p/A p/B p/C" || first.Same != nil {
		t.Fatalf("first call: %q, same %+v; want every task in full", listed(first), first.Same)
	}
	tags := map[string]string{}
	for _, ts := range first.Tasks {
		if ts.Tag == "" {
			t.Fatalf("%s has no tag", ts.Task)
		}
		tags[ts.Project+"/"+ts.Task] = ts.Tag
	}
	if err := os.WriteFile(tasks[0].path(taskfiles.FileHeartbeat), []byte("beat 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteJSONAtomic(tasks[1].path(taskfiles.FileStatus), wire.Status{Task: "B", Attempt: 1, Status: wire.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(wire.LiveRequest{Tasks: named, Tags: []string{tags["p/A"], tags["p/B"], ""}})
	if err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, string(doc), "status", "--root", root, "--live")
	var ns wire.NodeStatus
	if err := json.Unmarshal(out, &ns); err != nil || code != 0 {
		t.Fatalf("status --live: exit %d, %s", code, out)
	}
	if got := listed(ns); got != "p/B p/C" {
		t.Errorf("in full: %q, want p/B (changed) and p/C (no tag held)", got)
	}
	if ns.Same.Len() != 1 || ns.Same.Tasks[0] != "p/A" || ns.Same.Heartbeats[0] != "beat 2" {
		t.Errorf("same = %+v, want p/A with its new heartbeat", ns.Same)
	}
	for _, ts := range ns.Tasks {
		if ts.Task == "B" && ts.Tag == tags["p/B"] {
			t.Error("B's entry changed and kept its tag")
		}
		if ts.Task == "C" && ts.Tag != tags["p/C"] {
			t.Error("C's entry did not change and took another tag")
		}
	}
}

// TestStatusServe: `status --serve` answers one request a line with the
// reply `status` gives for the same flags, one a line, until its stdin
// ends; a request it would refuse ends it with that error.
func TestStatusServe(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, id := range []string{"A", "B"} {
		tk := newTask(t, root, wire.Launch{Project: "p", Task: id})
		if err := taskfiles.WriteJSONAtomic(tk.path(taskfiles.FileStatus), wire.Status{Task: id, Attempt: 1, Status: wire.StatusRunning}); err != nil {
			t.Fatal(err)
		}
	}
	full := liveOf(t, root, []string{"p/A", "p/B"})
	reqs := []wire.StatusRequest{
		{},
		{Projects: []string{"p"}, Live: true, LiveRequest: wire.LiveRequest{Tasks: []string{"p/A", "p/B"}, Tags: []string{full.Tasks[0].Tag, ""}}},
	}
	var in strings.Builder
	for _, r := range reqs {
		doc, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(doc, '\n'))
	}
	out, code := runWrapper(t, in.String(), "status", "--serve", "--root", root)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, %d replies (want 2): %s", code, len(lines), out)
	}
	var first, second wire.NodeStatus
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Listing != "" || listed(first) != "p/A p/B" {
		t.Fatalf("full request: %q (listing %q), %v; want p/A p/B", listed(first), first.Listing, err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil || second.Listing != wire.ListingLive || listed(second) != "p/B" ||
		second.Same.Len() != 1 || second.Same.Tasks[0] != "p/A" {
		t.Fatalf("live request: %q (listing %q, same %+v), %v; want p/B in full, p/A the same", listed(second), second.Listing, second.Same, err)
	}
	out, code = runWrapper(t, `{"projects":["../x"]}`+"\n", "status", "--serve", "--root", root)
	wantError(t, out, code, wire.KindUsage)
	out, code = runWrapper(t, "", "status", "--serve", "--live", "--root", root)
	wantError(t, out, code, wire.KindUsage)
}
