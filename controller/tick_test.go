package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestDecideTick: the claims of a tick are decided over what the same
// tick's changes leave, from one read and without I/O: a slot freed by a
// completion is refilled, a dependent whose last dependency completes
// starts, a lost attempt starts elsewhere at once; a halt, a stale
// attempt, a dependency taken back and a pause hold back what they must.
// (S00 is a dependency read as completed.)
func TestDecideTick(t *testing.T) {
	running, ended, task := runningStatus, endedStatus, decideTask
	pending := func(id string, deps ...string) domain.Task { return task(id, domain.Pending, "", 0, deps...) }
	for _, tc := range []struct {
		name     string
		tasks    []domain.Task // read: what can move
		runnable []domain.Task // read: due and free of dependencies
		busy     map[string]int
		pulls    map[string]any
		prev     map[string]store.Node
		runs     map[attemptKey]attemptFacts
		ranOn    map[string]bool
		opts     domain.ProjectOptions
		want     string // "ID@node" in claim order
	}{
		{name: "a completion frees its slot for a task in the same tick",
			tasks:    []domain.Task{task("S01", domain.Running, "n1", 1), task("S02", domain.Running, "n1", 1), task("S03", domain.Running, "n2", 1), task("S04", domain.Running, "n2", 1)},
			runnable: []domain.Task{pending("S05")},
			busy:     map[string]int{"n1": 2, "n2": 2},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusCompleted, ""), running("S02", 1, "1", true)},
				"n2": []wire.TaskStatus{running("S03", 1, "1", true), running("S04", 1, "1", true)}},
			want: "S05@n1"},
		{name: "a dependent whose last dependency completes now starts now (start_from: base)",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), func() domain.Task {
				tk := pending("S02", "S01", "S00")
				tk.StartFrom = domain.StartBase
				return tk
			}()},
			busy:  map[string]int{"n1": 1},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusCompleted, "")}, "n2": []wire.TaskStatus{}},
			want:  "S02@n1"},
		{name: "a dependent that receives its outputs waits for their collection",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), pending("S02", "S01", "S00")},
			busy:  map[string]int{"n1": 1},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusCompleted, "")}, "n2": []wire.TaskStatus{}},
			want:  ""},
		{name: "a dependent of a task that fails now does not start",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), pending("S02", "S01")},
			busy:  map[string]int{"n1": 1},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassExit)}, "n2": []wire.TaskStatus{}},
			want:  ""},
		{name: "a halt reached in the tick starts nothing more",
			tasks: []domain.Task{func() domain.Task {
				tk := task("S01", domain.Running, "n1", 1)
				tk.MaxRetries = 0
				return tk
			}()},
			runnable: []domain.Task{pending("S05")},
			busy:     map[string]int{"n1": 1},
			pulls:    map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassExit)}, "n2": []wire.TaskStatus{}},
			opts:     domain.ProjectOptions{HaltFail: 1},
			want:     ""},
		{name: "a stale attempt holds its node and its task until it is killed",
			tasks:    []domain.Task{pending("S09")},
			runnable: []domain.Task{pending("S05"), pending("S09")},
			pulls:    map[string]any{"n1": []wire.TaskStatus{running("S09", 1, "1", true)}, "n2": []wire.TaskStatus{}},
			ranOn:    map[string]bool{"n1\x00p/S09": true},
			want:     "S05@n2"},
		{name: "a node's word alone holds the node but not the task",
			tasks:    []domain.Task{pending("S09")},
			runnable: []domain.Task{pending("S05"), pending("S09")},
			pulls:    map[string]any{"n1": []wire.TaskStatus{running("S09", 1, "1", true)}, "n2": []wire.TaskStatus{}},
			ranOn:    map[string]bool{"n1\x00p/S09": false},
			want:     "S05@n2 S09@n2"},
		{name: "an attempt lost with its node starts elsewhere at once",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1)},
			busy:  map[string]int{"n1": 1},
			pulls: map[string]any{"n1": errors.New("connection refused"), "n2": []wire.TaskStatus{}},
			prev:  map[string]store.Node{"n1": {Name: "n1", OfflineSince: t0.Add(-11 * time.Minute)}},
			want:  "S01@n2"},
		{name: "a dependency taken back holds its dependent",
			tasks:    []domain.Task{task("S01", domain.Completed, "n1", 1)},
			runnable: []domain.Task{pending("S02", "S01")},
			pulls:    map[string]any{"n1": errors.New("connection refused"), "n2": []wire.TaskStatus{}},
			prev:     map[string]store.Node{"n1": {Name: "n1", OfflineSince: t0.Add(-11 * time.Minute)}},
			runs:     map[attemptKey]attemptFacts{{"p", "S01", 1}: {}},
			want:     "S01@n2"},
		{name: "a rate limit pauses its mode for the claims of the same tick",
			tasks:    []domain.Task{task("S01", domain.Running, "n1", 1), task("S03", domain.Running, "n2", 1)},
			runnable: []domain.Task{pending("S05"), pending("S06")},
			busy:     map[string]int{"n1": 1, "n2": 1},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassRateLimit)},
				"n2": []wire.TaskStatus{running("S03", 1, "1", true)}},
			runs: map[attemptKey]attemptFacts{{"p", "S01", 1}: {mode: "team"}},
			want: "S05@n2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := decider(t, decideNodes)
			pulls := nodeSays(tc.pulls)
			snap := wholeSnapshot(tc.tasks, projectFacts{opts: tc.opts}, tc.runs)
			snap.modes = map[string]map[string]string{"p": {}}
			snap.depStatus = map[string]map[string]domain.Status{"p": {"S00": domain.Completed}}
			r := &tickRead{snapshot: snap, prev: tc.prev, ranOn: tc.ranOn, active: []domain.Project{{Name: "p"}},
				runnable: map[string][]domain.Task{"p": tc.runnable},
				claims:   assignInput{caps: c.capacities(pulls, tc.busy, nil), modeUse: map[string]int{}, unusable: map[string]string{}}}
			tp := c.decideTick(r, pulls, nil, nil, nil, t0)
			var got []string
			for _, p := range tp.picks {
				got = append(got, p.task.ID+"@"+p.node.cfg.Name)
			}
			if strings.Join(got, " ") != tc.want {
				var ops []string
				for _, o := range tp.ops {
					ops = append(ops, o.String())
				}
				t.Errorf("claims %q, want %q; the tick's changes:\n  %s", strings.Join(got, " "), tc.want, strings.Join(ops, "\n  "))
			}
		})
	}
}

// TestTaskCache: a tick is handed the task it holds only at the version
// read now; a row not read in a tick is dropped at its end, and a tick
// whose decisions were not recorded drops everything held.
func TestTaskCache(t *testing.T) {
	var c taskCache
	a, b := &domain.Task{ID: "A"}, &domain.Task{ID: "B"}
	c.begin()
	c.keep("p", store.TickRead{Tasks: []*domain.Task{a, b}, Versions: map[string]int64{"A": 1, "B": 2}}, nil)
	c.end()
	known := c.known("p")
	if known("A", 1) != a || known("A", 3) != nil || c.known("q")("A", 1) != nil {
		t.Fatalf("held A at 1: got %v at 1, %v at 3, %v in another project", known("A", 1), known("A", 3), c.known("q")("A", 1))
	}
	c.begin()
	c.keep("p", store.TickRead{Tasks: []*domain.Task{a}, Versions: map[string]int64{"A": 1}}, nil)
	c.end()
	if c.known("p")("B", 2) != nil {
		t.Error("B, not read in the last tick, is still held")
	}
	c.begin()
	c.drop()
	if c.known("p")("A", 1) != nil {
		t.Error("A is held after a tick that was not recorded")
	}
}

// TestTaskCacheReuse: a project's last read is decided over again only
// while it is what TickTasks would read: not after a change to one of its
// tasks, attempts or dependencies (in any task, live or not), nor when
// the nodes name other tasks live, nor once its earliest backoff is due,
// nor after a tick that was not recorded. A heartbeat, written as a tick
// writes it, is no change. Another project's change is not this one's.
func TestTaskCacheReuse(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	due := t0.Add(time.Hour)
	update := func(fn func(tx *store.Tx) error) {
		t.Helper()
		if err := st.Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx *store.Tx) error {
		for _, p := range []string{"p", "q"} {
			if err := tx.EnsureProject(ctx, p, "{}"); err != nil {
				return err
			}
			for _, id := range []string{"A", "B", "C"} {
				task := domain.Task{Project: p, ID: id, Title: id, Type: "implementation", Priority: 5, SpecHash: "h", Snapshot: []byte("x")}
				if id == "C" {
					task.DependsOn = []string{"A"}
				}
				if err := tx.InsertTask(ctx, task); err != nil {
					return err
				}
			}
			if _, err := tx.Claim(ctx, p, "A", "n1"); err != nil {
				return err
			}
		}
		return tx.SetTask(ctx, "p", "B", store.TaskPatch{NotBefore: &due})
	})
	var c taskCache
	// tick reads p as a tick does and reports whether the read was reused.
	tick := func(named []string, now time.Time) bool {
		t.Helper()
		named = slices.Sorted(slices.Values(named))
		var reused bool
		c.begin()
		update(func(tx *store.Tx) error {
			read, ok, err := c.reuse(ctx, tx, "p", named, now)
			if err == nil && !ok {
				read, err = tx.TickTasks(ctx, "p", named, now, c.known("p"))
			}
			if err != nil {
				return err
			}
			if ok {
				fresh, err := tx.TickTasks(ctx, "p", named, now, nil)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(fresh, read) {
					t.Errorf("reused %+v, but the database reads %+v", read, fresh)
				}
			}
			reused = ok
			c.keep("p", read, named)
			return nil
		})
		c.end()
		return reused
	}
	for _, step := range []struct {
		name   string
		change func(tx *store.Tx) error
		named  []string
		now    time.Time
		reused bool
	}{
		{"first read", nil, []string{"A"}, t0, false},
		{"nothing changed", nil, []string{"A"}, t0, true},
		{"a minute later", nil, []string{"A"}, t0.Add(time.Minute), true},
		{"a heartbeat", func(tx *store.Tx) error {
			// The tick that writes it sets it in the row it holds.
			for _, task := range c.reads["p"].read.Tasks {
				if task.ID == "A" {
					task.Heartbeat, task.HeartbeatAt = "beat 1", t0
				}
			}
			return tx.Beats(ctx, "p", map[string]string{"A": "beat 1"}, t0)
		}, []string{"A"}, t0, true},
		{"a pending task's title", func(tx *store.Tx) error {
			return tx.SetTask(ctx, "p", "B", store.TaskPatch{Warning: new("w")})
		}, []string{"A"}, t0, false},
		{"steady again", nil, []string{"A"}, t0, true},
		{"an attempt row", func(tx *store.Tx) error {
			return tx.SetAttempt(ctx, "p", "A", 1, store.AttemptPatch{APIMode: new("team")})
		}, []string{"A"}, t0, false},
		{"another project's change", func(tx *store.Tx) error {
			return tx.SetTask(ctx, "q", "B", store.TaskPatch{Warning: new("w")})
		}, []string{"A"}, t0, true},
		{"other tasks named", nil, []string{"B", "A"}, t0, false},
		{"the same named in another order", nil, []string{"A", "B"}, t0, true},
		{"the backoff due", nil, []string{"A", "B"}, due, false},
	} {
		if step.change != nil {
			update(step.change)
		}
		if got := tick(step.named, step.now); got != step.reused {
			t.Errorf("%s: reused %v, want %v", step.name, got, step.reused)
		}
	}
	c.begin()
	c.drop()
	if tick([]string{"A", "B"}, due) {
		t.Error("a read reused after a tick that was not recorded")
	}
}

// TestFreeSlots: the slots a tick's claims may fill are the free ones and
// those the pulls report ended, never more than a node's slots: a full
// listing of 1,000 finished task directories (or a node's lie) does not
// make the tick read a thousand candidates.
func TestFreeSlots(t *testing.T) {
	c := decider(t, decideNodes) // n1 and n2, 2 slots each
	many := make([]wire.TaskStatus, 1000)
	for i := range many {
		many[i] = endedStatus(fmt.Sprintf("S%04d", i), 1, wire.StatusCompleted, "")
	}
	for _, tc := range []struct {
		name  string
		busy  map[string]int
		pulls map[string]any
		want  int
	}{
		{"idle nodes", nil, map[string]any{"n1": []wire.TaskStatus{}, "n2": []wire.TaskStatus{}}, 4},
		{"one ended of two busy", map[string]int{"n1": 2}, map[string]any{"n1": []wire.TaskStatus{endedStatus("S01", 1, wire.StatusCompleted, "")}, "n2": []wire.TaskStatus{}}, 3},
		{"a thousand finished directories", map[string]int{"n1": 2, "n2": 1}, map[string]any{"n1": many, "n2": many}, 4},
		{"a node that did not answer", map[string]int{"n1": 1}, map[string]any{"n1": errors.New("down"), "n2": many}, 2},
	} {
		pulls := nodeSays(tc.pulls)
		if got := freeSlots(c.capacities(pulls, tc.busy, nil), pulls); got != tc.want {
			t.Errorf("%s: %d free slots, want %d", tc.name, got, tc.want)
		}
	}
}
