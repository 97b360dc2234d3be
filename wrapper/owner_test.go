package wrapper

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// replyTasks returns the tasks ("project/ID") of a status reply, the same ones
// included.
func replyTasks(t *testing.T, out []byte, code int) []string {
	t.Helper()
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	var ns wire.NodeStatus
	if err := json.Unmarshal(out, &ns); err != nil {
		t.Fatalf("status reply %q: %v", out, err)
	}
	var keys []string
	for _, ts := range ns.Tasks {
		keys = append(keys, ts.Project+"/"+ts.Task)
	}
	if ns.Same != nil {
		keys = append(keys, ns.Same.Tasks...)
	}
	slices.Sort(keys)
	return keys
}

// TestNodeSeesOnlyItsAttempts: one work_dir holds a running attempt of
// box1 (A) and one of box2 (B), as when two node names reach one directory.
// `status` (full, live, served) and `watch` with --node box1 report A
// alone, even when B is named; `kill --node box1` of B signals nothing
// (other_node) — its process record says box2 even once B's launch.json is
// rewritten to say box1 — while it kills A. Without --node every attempt
// is reported, as before.
func TestNodeSeesOnlyItsAttempts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	wait := shell(`while [ ! -e go ]; do sleep 0.05; done`)
	a := newTask(t, root, wire.Launch{Task: "A", Node: "box1", Command: wait})
	b := newTask(t, root, wire.Launch{Task: "B", Node: "box2", Command: wait})
	a.run(t, "")
	b.run(t, "")
	// A quick start writes its record with its tool, a moment after its
	// first status.
	var rec *proc.ProcRecord
	wtest.Poll(t, 5*time.Second, "B's process record", func() bool {
		r, err := b.record()
		rec = r
		return err == nil && r.ToolPGID > 1
	})
	if rec.Node != "box2" {
		t.Fatalf("B's process record: %+v; want node box2", rec)
	}

	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"full", "", []string{"status", "--root", root, "--node", "box1"}, []string{"demo/A"}},
		{"full of box2", "", []string{"status", "--root", root, "--node", "box2"}, []string{"demo/B"}},
		{"any node", "", []string{"status", "--root", root}, []string{"demo/A", "demo/B"}},
		{"live naming B", `{"tasks":["demo/B"]}`, []string{"status", "--root", root, "--node", "box1", "--live"}, []string{"demo/A"}},
		{"served", `{}` + "\n" + `{"live":true,"tasks":["demo/B"]}` + "\n", []string{"status", "--serve", "--root", root, "--node", "box1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runWrapper(t, tc.stdin, tc.args...)
			if tc.want == nil {
				// Two replies, one a line, each of A alone.
				lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
				if len(lines) != 2 {
					t.Fatalf("served replies: %q", out)
				}
				for _, l := range lines {
					if got := replyTasks(t, l, code); !slices.Equal(got, []string{"demo/A"}) {
						t.Errorf("a served reply lists %v, want demo/A", got)
					}
				}
				return
			}
			if got := replyTasks(t, out, code); !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		})
	}

	fs := nodeFrames(t, root, "box1", true)
	b.touch(t, "go")
	b.waitFinal(t)
	a.touch(t, "go")
	a.waitFinal(t)
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case f := <-fs:
			if slices.Contains(f.Tasks, "demo/B") {
				t.Errorf("watch --node box1 told a change of box2's attempt: %+v", f)
			}
			if i := slices.Index(f.Tasks, "demo/A"); i >= 0 && f.Statuses[i].Status != nil && f.Statuses[i].Status.Final() {
				done = true
			}
		case <-deadline:
			t.Fatal("watch --node box1 told no end of A")
		}
	}
}

// TestKillSparesAnotherNodesAttempt: `kill --node box1` of box2's running
// attempt signals nothing and says whose it is, even once the task has
// rewritten its launch.json to name box1; `kill --node box2` kills it.
func TestKillSparesAnotherNodesAttempt(t *testing.T) {
	t.Parallel()
	b := newTask(t, "", wire.Launch{Task: "B", Node: "box2", Command: shell(`while [ ! -e go ]; do sleep 0.05; done`)})
	b.run(t, "")
	b.waitStatus(t, "running", func(st *wire.Status) bool { return st.Status == wire.StatusRunning })
	b.setLaunch(t, wire.Launch{Project: "demo", Task: "B", Attempt: 1, Node: "box1", Command: shell("true")})
	out, code := runWrapper(t, "", "kill", "--dir", b.dir, "--grace", "1s", "--node", "box1")
	wantError(t, out, code, wire.KindOtherNode)
	if !b.alive(t) {
		t.Fatal("kill --node box1 stopped box2's attempt")
	}
	out, code = runWrapper(t, "", "kill", "--dir", b.dir, "--grace", "1s", "--node", "box2")
	if code != 0 {
		t.Fatalf("kill --node box2: exit %d: %s", code, out)
	}
	if st := b.waitFinal(t); st.Status != wire.StatusKilled {
		t.Errorf("after kill --node box2: %+v", st)
	}
}
