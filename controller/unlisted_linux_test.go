package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
)

// uncapped is the local node with every command it runs (each wrapper
// call: status, run and its supervisor, kill, collect) made without the
// capabilities that let root read or write what a mode refuses (dropped
// from the bounding set, so the wrapper, run as root, never has them): as
// a node's user who is not root makes them. The tests run as root, whom a
// chmod 000 stops from nothing.
type uncapped struct {
	*nodes.Local
	setpriv string
}

func (u uncapped) argv(argv []string) []string {
	return append([]string{u.setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"}, argv...)
}

func (u uncapped) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	return u.Local.Exec(ctx, u.argv(argv), stdin)
}

func (u uncapped) Converse(ctx context.Context, argv []string) (nodes.Conversation, error) {
	return u.Local.Converse(ctx, u.argv(argv))
}

// TestUnlistedProjectOnARealNode: an unconfined task of project p makes
// p's tasks/ unreadable to the node's user (chmod 000, one level above its
// own directory). The node's full listing used to fail whole: the node's
// pulls failed until one succeeded, every full one, so project q's tasks
// never ran there, and a live listing (without p's running attempt) made
// that attempt crashed. Now q's tasks run and complete, the full listing
// counts (the next call may be a live one), p's attempt stays running,
// unknown, the operator is told once, and once the mode is back p's
// attempt is seen again and completes as attempt 1. Its supervisor could
// not beat while it was unknown (three minutes, past heartbeat_timeout):
// the first reply after the mode is back, before its next beat, used to
// fail it as hung and kill it.
func TestUnlistedProjectOnARealNode(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run the node's status without root's capabilities: %v", err)
	}
	side := t.TempDir()
	started, release := filepath.Join(side, "started"), filepath.Join(side, "release")
	h := newHarness(t, unsandboxed("", "the task tells the test it runs and waits for a file of the test's"), shellProject(map[string]string{
		"S01-wait.md": "touch " + started + "\nuntil [ -e " + release + " ]; do sleep 0.05; done\n",
	}))
	t.Cleanup(func() { killAll(t, h) })
	h.useTransport("local", uncapped{Local: nodes.NewLocal(), setpriv: setpriv})
	n := h.ctl.nodes["local"]
	// The task itself runs, not only its supervisor: status.json says
	// running before the tool starts, and a tasks/ made unreadable then
	// fails the start with a final status that cannot be written (the
	// supervisor gone, the status running: a crash once the mode is
	// back), which no task's own chmod can do.
	h.tickUntil("p/S01's tool to run and its heartbeat to be seen", func() bool {
		_, err := os.Stat(started)
		tk := h.task("S01")
		return err == nil && tk.Status == domain.Running && tk.Heartbeat != ""
	})

	tasks := filepath.Join(h.work, "p", "tasks")
	if err := os.Chmod(tasks, 0); err != nil { // as the task's `chmod 000 ../..` would
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(tasks, 0o700) })
	if out, err := exec.Command(setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--", "ls", tasks).CombinedOutput(); err == nil {
		t.Fatalf("%s can still be listed without root's capabilities (the test shows nothing): %s", tasks, out)
	}
	h.addProject("q", shellProject(map[string]string{"Q01-a.md": "echo a > a.txt\n", "Q02-b.md": "echo b > b.txt\n"}))

	ctx := context.Background()
	n.listing.failed() // a full listing next
	h.tick()
	if live, _ := n.listing.next(false, h.clock.Now()); !live {
		t.Fatal("the node's full listing did not count (the next call is a full one again): it keeps asking for one")
	}
	nodesNow, err := h.st.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodesNow {
		if nd.State != store.NodeOnline {
			t.Fatalf("node %s is %s (%s) beside a project it cannot list, want online", nd.Name, nd.State, nd.LastError)
		}
	}
	ticks := 0
	h.tickUntil("q's tasks to complete", func() bool {
		if ticks++; ticks%4 == 0 {
			n.listing.failed() // full listings as well as live ones
		}
		for _, id := range []string{"Q01", "Q02"} {
			if tk, err := h.st.Task(ctx, "q", id); err != nil || tk.Status != domain.Completed {
				return false
			}
		}
		return true
	})
	if tk := h.task("S01"); tk.Status != domain.Running || tk.Attempt != 1 || tk.RetriesUsed != 0 {
		t.Fatalf("p/S01 is %s, attempt %d, %d retries used (%s: %s) while p's tasks cannot be listed; want running attempt 1: unknown, not crashed",
			tk.Status, tk.Attempt, tk.RetriesUsed, tk.ErrorClass, tk.Error)
	}
	events, err := h.st.Events(ctx, "p", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	for _, ev := range events {
		if ev.Kind == "warning" && strings.Contains(ev.Message, "cannot list the tasks of project p") {
			said++
			if !strings.Contains(ev.Message, "chmod 700 '"+tasks+"'") {
				t.Errorf("the warning %q does not say the fix (chmod 700 %s)", ev.Message, tasks)
			}
		}
	}
	if said != 1 {
		t.Errorf("the operator was told %d times that p's tasks cannot be listed, want once", said)
	}

	h.clock.Advance(3 * time.Minute) // past heartbeat_timeout (2m), within node_offline_timeout (5m)
	h.tickUntil("p/S01 to be taken for unknown three minutes on", func() bool {
		return h.ctl.unseenAt[attemptKey{"p", "S01", 1}].Equal(h.clock.Now()) // a pull skipped or failed under load does not
	})
	if err := os.Chmod(tasks, 0o700); err != nil {
		t.Fatal(err)
	}
	h.tick() // well before the supervisor's next beat (10s): the heartbeat is the one before the chmod
	if tk := h.task("S01"); tk.Status != domain.Running || tk.Attempt != 1 {
		t.Fatalf("p/S01 is %s, attempt %d (%s: %s) once its tasks can be listed again, want running attempt 1: it was unknown, not hung",
			tk.Status, tk.Attempt, tk.ErrorClass, tk.Error)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("p/S01 to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 1 || tk.RetriesUsed != 0 {
		t.Fatalf("p/S01 completed as attempt %d with %d retries, want attempt 1", tk.Attempt, tk.RetriesUsed)
	}
}
