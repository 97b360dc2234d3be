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
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestLaunchBatch: one call starts several attempts from one document on
// stdin — spec, launch.json and the secret environment — and answers for
// each: started, refused as invalid, or already running. The secret
// reaches the tool and no file.
func TestLaunchBatch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := func(id string) string { return filepath.Join(root, "demo", "tasks", id) }
	const secret = "sk-launch-SECRET-42b7"
	busy := newTask(t, root, wire.Launch{Task: "T3", Command: shell("sleep 30")})
	busy.run(t, "")
	launch := func(id, script string) wire.Launch {
		return wire.Launch{Project: "demo", Task: id, Attempt: 1, Node: "local", Stdin: "spec",
			Command: shell(script), HeartbeatSeconds: 0.1, TimeoutSeconds: 20}
	}
	batch := wire.LaunchBatch{Launches: []wire.LaunchItem{
		{Dir: dir("T1"), Spec: "# One\n", Launch: launch("T1", `cat > seen-spec.txt; printf %s "$KEY" | wc -c > key-length.txt`),
			Env: map[string]string{"KEY": secret}},
		{Dir: dir("T2"), Spec: "# Two\n", Launch: wire.Launch{Task: "T2"}}, // no command
		{Dir: dir("T3"), Spec: "# Three\n", Launch: launch("T3", "true")},
		{Dir: "relative/T4", Spec: "# Four\n", Launch: launch("T4", "true")},
	}}
	doc, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, string(doc), "launch")
	var reply wire.LaunchReply
	if code != 0 || json.Unmarshal(out, &reply) != nil || len(reply.Results) != 4 {
		t.Fatalf("launch: exit %d: %s", code, out)
	}
	r := reply.Results
	if r[0].Run == nil || r[0].Run.PID <= 0 || r[0].Dir != dir("T1") {
		t.Errorf("T1: %+v, want started", r[0])
	}
	if r[1].Run != nil || r[1].Kind != wire.KindUsage || !strings.Contains(r[1].Error, "command is empty") {
		t.Errorf("T2: %+v, want a usage error", r[1])
	}
	if r[2].Kind != wire.KindAlreadyRunning {
		t.Errorf("T3: %+v, want already_running", r[2])
	}
	if r[3].Kind != wire.KindUsage {
		t.Errorf("T4 (relative dir): %+v, want a usage error", r[3])
	}
	t1 := &testTask{root: root, project: "demo", name: "T1", dir: dir("T1")}
	t.Cleanup(func() { t1.cleanup(t) })
	if st := t1.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("T1: %+v", st)
	}
	if got := t1.readFile(t, "output/seen-spec.txt"); got != "# One\n" {
		t.Errorf("the tool read %q as its spec", got)
	}
	if got := strings.TrimSpace(t1.readFile(t, "output/key-length.txt")); got != "21" {
		t.Errorf("the tool's KEY has %s bytes, want the secret's 21", got)
	}
	if fi, err := os.Stat(t1.path(taskfiles.FileSpec)); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("spec.md: %v %v, want read-only", fi, err)
	}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
				t.Errorf("the secret is in %s", p)
			}
		}
		return nil
	})
	// Nothing but JSON on stdin is refused.
	if out, code := runWrapper(t, "not json", "launch"); code == 0 || !strings.Contains(string(out), wire.KindUsage) {
		t.Errorf("launch with garbage on stdin: exit %d: %s", code, out)
	}
	// `run` without --dir takes the same document (the controller's call).
	doc, err = json.Marshal(wire.LaunchBatch{Launches: []wire.LaunchItem{{Dir: dir("T5"), Spec: "# Five\n", Launch: launch("T5", "true")}}})
	if err != nil {
		t.Fatal(err)
	}
	out, code = runWrapper(t, string(doc), "run")
	reply = wire.LaunchReply{}
	if code != 0 || json.Unmarshal(out, &reply) != nil || len(reply.Results) != 1 || reply.Results[0].Run == nil {
		t.Fatalf("run with a launch document: exit %d: %s", code, out)
	}
	t5 := &testTask{root: root, project: "demo", name: "T5", dir: dir("T5")}
	t.Cleanup(func() { t5.cleanup(t) })
	if st := t5.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("T5: %+v", st)
	}
}

// TestWrapperLogIsNeverFollowed: the task replaces wrapper.log with a link
// to a file outside its directory, or with a FIFO; the next start neither
// writes through the link nor hangs, and starts a fresh log.
func TestWrapperLogIsNeverFollowed(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"symlink", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			outside := filepath.Join(t.TempDir(), "victim.txt")
			if err := os.WriteFile(outside, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tk := newTask(t, "", wire.Launch{Command: shell("true")})
			logPath := tk.path(taskfiles.FileWrapper)
			var err error
			if kind == "symlink" {
				err = os.Symlink(outside, logPath)
			} else {
				err = syscall.Mkfifo(logPath, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			tk.run(t, "")
			if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
				t.Fatalf("attempt: %+v", st)
			}
			if b, _ := os.ReadFile(outside); string(b) != "precious\n" {
				t.Errorf("the supervisor wrote through the link: %q", b)
			}
			if fi, err := os.Lstat(logPath); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("wrapper.log is %v, %v; want a regular file again", fi, err)
			}
		})
	}
}

// TestTmpIsFreshEachAttempt: each attempt's TMPDIR is an empty private
// directory; what the attempt before left there is moved aside at once and
// removed after the start, links included, without following them.
func TestTmpIsFreshEachAttempt(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep.txt"), []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk := newTask(t, "", wire.Launch{Command: shell(`touch "$TMPDIR/a"; mkdir "$TMPDIR/d"; ln -s '` + outside + `' "$TMPDIR/out"`)})
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("attempt 1: %+v", st)
	}
	tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1,
		Command: shell(`ls -A "$TMPDIR" | wc -l > n.txt; stat -c %a "$TMPDIR" > mode.txt`)})
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("attempt 2: %+v", st)
	}
	if n := strings.TrimSpace(tk.readFile(t, "output/n.txt")); n != "0" {
		t.Errorf("attempt 2's TMPDIR held %s entries", n)
	}
	if m := strings.TrimSpace(tk.readFile(t, "output/mode.txt")); m != "700" {
		t.Errorf("TMPDIR mode %s, want 700", m)
	}
	wtest.Poll(t, 5*time.Second, "the old tmp to be removed", func() bool {
		old, _ := filepath.Glob(filepath.Join(tk.dir, taskfiles.DirTmp+taskfiles.OldTmpSuffix+"*"))
		return len(old) == 0
	})
	if _, err := os.Stat(filepath.Join(outside, "keep.txt")); err != nil {
		t.Errorf("removing the old tmp followed its link: %v", err)
	}
}
