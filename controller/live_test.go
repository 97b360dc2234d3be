package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestListStateHolds: a live reply's unchanged entries are the held ones
// with the heartbeat the node gives; an entry said unchanged that the
// controller does not hold (a node answering what it was not asked) is
// left out, and the next call is a full one.
func TestListStateHolds(t *testing.T) {
	running := &wire.Status{Attempt: 1, Status: wire.StatusRunning}
	var l listState
	l.done(&wire.NodeStatus{Tasks: []wire.TaskStatus{
		{Project: "p", Task: "A", Alive: true, Status: running, Heartbeat: "1", Tag: "ta"},
		{Project: "p", Task: "B", Status: &wire.Status{Attempt: 1, Status: wire.StatusCompleted}, Tag: "tb"},
	}}, false, t0)
	if live, seen := l.next(false, t0); !live || !slices.Equal(seen, []string{"p/A"}) {
		t.Fatalf("next = %v %v, want a live call naming p/A", live, seen)
	}
	if got := l.tags([]string{"p/A", "p/B"}); !slices.Equal(got, []string{"ta", ""}) {
		t.Fatalf("tags = %q, want p/A's only (a full reply holds the live entries)", got)
	}
	st := &wire.NodeStatus{Listing: wire.ListingLive, Same: &wire.Same{Tasks: []string{"p/A"}, Heartbeats: []string{"2"}}}
	l.done(st, true, t0)
	if len(st.Tasks) != 1 || st.Tasks[0].Task != "A" || st.Tasks[0].Heartbeat != "2" || st.Tasks[0].Status != running || st.Same != nil {
		t.Fatalf("restored %+v (same %v), want A with heartbeat 2", st.Tasks, st.Same)
	}
	if live, _ := l.next(false, t0); !live {
		t.Fatal("a whole live reply asks for a full call")
	}
	st = &wire.NodeStatus{Listing: wire.ListingLive, Same: &wire.Same{Tasks: []string{"p/A", "p/Z"}, Heartbeats: []string{"3", "9"}}}
	l.done(st, true, t0)
	if len(st.Tasks) != 1 || st.Tasks[0].Task != "A" {
		t.Fatalf("restored %+v, want A alone", st.Tasks)
	}
	if live, _ := l.next(false, t0); live {
		t.Fatal("an unheld entry said unchanged did not ask for a full call")
	}
	l.done(&wire.NodeStatus{Tasks: st.Tasks}, false, t0)
	l.done(&wire.NodeStatus{Listing: wire.ListingLive, Same: &wire.Same{Tasks: []string{"p/A"}}}, true, t0)
	if live, _ := l.next(false, t0); live {
		t.Fatal("lists of unequal length did not ask for a full call")
	}
}

// TestLivePullListsWhatRuns: a steady status call of a node holding 200
// finished task directories and 2 running attempts reads the 2 (the
// node's live index and the tasks the database has running there), not
// the 202; the first call after the wrapper is checked and every
// fullListEvery-th call at least fullListGap after the last full one list
// them all, and so find a live attempt the database does not expect whose
// marker was lost: it is killed as stale.
func TestLivePullListsWhatRuns(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "sleep 60\n", "S02-b.md": "sleep 60\n"}))
	t.Cleanup(func() { killAll(t, h) })
	h.tickUntil("both tasks to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	tasksDir := filepath.Join(h.work, "p", "tasks")
	for i := range 200 {
		dir := filepath.Join(tasksDir, fmt.Sprintf("F%03d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		st := wire.Status{Task: filepath.Base(dir), Attempt: 1, Status: wire.StatusCompleted}
		if err := taskfiles.WriteFileAtomic(filepath.Join(dir, "status.json"), mustJSON(t, st), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	n := h.ctl.nodes["local"]
	pull := func(what string, want int, listing string) *pull {
		t.Helper()
		p := h.ctl.pullNode(ctx, n, []string{"p"}, h.ctl.liveOn.read(ctx, h.ctl.st, []string{"p"}, h.ctl.log))
		if p.err != nil {
			t.Fatalf("%s: %v", what, p.err)
		}
		if got := len(p.status.Tasks); got != want || p.status.Listing != listing {
			t.Fatalf("%s: %d tasks (listing %q), want %d (%q)", what, got, p.status.Listing, want, listing)
		}
		return p
	}
	inst := n.installed()
	n.inst.Store(nil) // as after a reinstall or a reply that did not parse
	pull("first call after the wrapper is checked", 202, "")
	for i := 1; i < fullListEvery; i++ {
		p := pull(fmt.Sprintf("live call %d", i), 2, wire.ListingLive)
		for _, id := range []string{"S01", "S02"} {
			if ts := p.tasks[taskKey("p", id)]; ts == nil || !ts.Alive || ts.Status == nil || ts.Status.Status != wire.StatusRunning {
				t.Fatalf("live call %d: %s is %+v", i, id, ts)
			}
		}
		// The controller holds the entries of the call before, and
		// sends their tags: the two unchanged entries come as their
		// heartbeats alone.
		if p.same != 2 {
			t.Fatalf("live call %d: %d entries said unchanged, want 2", i, p.same)
		}
	}
	pull(fmt.Sprintf("call %d, within fullListGap of the last full one", fullListEvery), 2, wire.ListingLive)
	h.clock.Advance(fullListGap)
	pull(fmt.Sprintf("call %d, fullListGap after the last full one", fullListEvery+1), 202, "")

	// An attempt the database does not know, out of the node's index.
	dir := filepath.Join(tasksDir, "Z99")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l := wire.Launch{Project: "p", Task: "Z99", Attempt: 1, Node: "local", Command: []string{"/bin/sh", "-c", "sleep 60"},
		HeartbeatSeconds: 1, TimeoutSeconds: 120}
	for name, data := range map[string][]byte{"spec.md": []byte("# Z\n"), "launch.json": mustJSON(t, l)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := n.tr.Exec(ctx, []string{inst.Path, "run", "--dir", dir}, []byte("{}")); err != nil || res.ExitCode != 0 {
		t.Fatalf("run Z99: %v %s %s", err, res.Stdout, res.Stderr)
	}
	t.Cleanup(func() { n.tr.Exec(ctx, []string{inst.Path, "kill", "--dir", dir, "--grace", "1s"}, nil) })
	if err := os.Remove(filepath.Join(tasksDir, ".live", "Z99")); err != nil {
		t.Fatal(err)
	}
	stale := func() bool {
		return slices.ContainsFunc(h.events("stale"), func(e store.Event) bool { return e.Task == "Z99" })
	}
	h.tick() // a live call: Z99 is out of sight
	if stale() {
		t.Fatal("Z99 found by a live call; the test proves nothing")
	}
	h.tickUntil("the next full call to find Z99 stale", func() bool {
		h.clock.Advance(fullListGap / 4)
		return stale()
	})
	h.tickUntil("Z99 to be killed", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "status.json"))
		var st wire.Status
		return json.Unmarshal(b, &st) == nil && st.Status == wire.StatusKilled
	})
	for _, id := range []string{"S01", "S02"} {
		if s := h.task(id).Status; s != domain.Running {
			t.Errorf("%s is %s, want still running", id, s)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
