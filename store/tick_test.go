package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestTickTasksReadsWhatCanMove: of a project of 2,000 tasks, a tick reads
// the live ones, the blocked ones, the completed one not collected, the
// ones a node names, and the pending tasks downstream of a live or dead
// task (through pending and blocked tasks); the rest only as counts, with
// the earliest backoff. A damaged row anywhere fails the read with
// ErrDamaged; CancelWaiting cancels every waiting task with an event.
func TestTickTasksReadsWhatCanMove(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := s.Now()
	soon := now.Add(time.Minute)
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		add := func(id string, deps ...string) error {
			return tx.InsertTask(ctx, domain.Task{Project: "p", ID: id, Title: id, Type: "implementation", Priority: 1,
				DependsOn: deps, SpecHash: "h", Snapshot: []byte("echo\n")})
		}
		for i := range 2000 {
			if err := add(fmt.Sprintf("Z%04d", i)); err != nil {
				return err
			}
		}
		for _, x := range [][]string{{"R1"}, {"D1", "R1"}, {"D2", "D1"}, {"D3", "D2", "DONE"}, {"F1"}, {"D4", "F1"},
			{"DONE"}, {"AFTER", "DONE"}, {"UNC"}, {"BL", "F1"}, {"NAMED"}, {"BACK"}} {
			if err := add(x[0], x[1:]...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	set := func(stmt string, args ...any) {
		t.Helper()
		if _, err := s.db.ExecContext(ctx, stmt, args...); err != nil {
			t.Fatal(err)
		}
	}
	set(`UPDATE tasks SET status = 'running', attempt = 1 WHERE id = 'R1'`)
	set(`UPDATE tasks SET status = 'failed' WHERE id = 'F1'`)
	set(`UPDATE tasks SET status = 'blocked' WHERE id = 'BL'`)
	set(`UPDATE tasks SET status = 'completed', attempt = 1 WHERE id IN ('DONE', 'UNC', 'NAMED')`)
	set(`INSERT INTO attempts (project, task, attempt, node, status, collected_at) VALUES
		('p', 'DONE', 1, 'n', 'completed', ?), ('p', 'UNC', 1, 'n', 'completed', ''), ('p', 'NAMED', 1, 'n', 'completed', ?)`,
		formatTime(now), formatTime(now))
	set(`UPDATE tasks SET not_before = ? WHERE id = 'BACK'`, formatTime(soon))

	var read TickRead
	err = s.Update(ctx, func(tx *Tx) error {
		var err error
		read, err = tx.TickTasks(ctx, "p", []string{"NAMED"}, now, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range read.Tasks {
		ids = append(ids, x.ID)
	}
	// D3 is downstream of R1 through D1 and D2; AFTER waits on a completed
	// task only and is not read; nor are the 2,000 independent tasks.
	want := []string{"BL", "D1", "D2", "D3", "D4", "NAMED", "R1", "UNC"}
	if !slices.Equal(ids, want) {
		t.Fatalf("read %v, want %v", ids, want)
	}
	if read.DepStatus["R1"] != domain.Running || read.DepStatus["F1"] != domain.Failed || read.DepStatus["DONE"] != domain.Completed {
		t.Errorf("dependency statuses %v", read.DepStatus)
	}
	if read.Counts[domain.Pending] != 2000+6 || read.Counts[domain.Failed] != 1 || read.Counts[domain.Completed] != 3 {
		t.Errorf("counts %v", read.Counts)
	}
	if !read.NextDue.Equal(soon) {
		t.Errorf("next due %v, want %v", read.NextDue, soon)
	}

	// Every waiting task is canceled by one call, each with its event.
	var n int
	err = s.Update(ctx, func(tx *Tx) error {
		var err error
		n, err = tx.CancelWaiting(ctx, Change{Project: "p", Kind: "halt", Message: "halted"})
		return err
	})
	if err != nil || n != 2000+6+1 {
		t.Fatalf("CancelWaiting = %d, %v; want %d", n, err, 2000+6+1)
	}
	counts, err := s.Counts(ctx, "p")
	if err != nil || counts[domain.Pending] != 0 || counts[domain.Blocked] != 0 || counts[domain.Canceled] != n {
		t.Errorf("after CancelWaiting: %v, %v", counts, err)
	}
	var events int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM events WHERE project = 'p' AND kind = 'halt'`).Scan(&events); err != nil || events != n {
		t.Errorf("%d halt events (%v), want %d", events, err, n)
	}

	// A damaged row, read by the tick or not, is the project's error.
	for _, tc := range []struct{ stmt, want string }{
		{`UPDATE tasks SET depends_on = '["Z' WHERE id = 'Z0007'`, "task p/Z0007: read depends_on"},
		{`UPDATE tasks SET depends_on = '["Z0001"]', tags = '{"a":1}' WHERE id = 'Z0007'`, "task p/Z0007: read tags"},
		{`UPDATE tasks SET tags = '[]', limits = '[1]' WHERE id = 'Z0007'`, "task p/Z0007: read limits"},
	} {
		set(tc.stmt)
		err = s.Update(ctx, func(tx *Tx) error { _, err := tx.TickTasks(ctx, "p", nil, now, nil); return err })
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("after %s: %v, want ErrDamaged with %q", tc.stmt, err, tc.want)
		}
	}
	set(`UPDATE tasks SET limits = '' WHERE id = 'Z0007'`)
	if err := s.Update(ctx, func(tx *Tx) error { _, err := tx.TickTasks(ctx, "p", nil, now, nil); return err }); err != nil {
		t.Errorf("repaired: %v", err)
	}
}

// TestTickReadsUseIndexes: the tick's reads of dependents, backoffs and
// damage go through their indexes, and its read of the tasks that can move
// never walks every task of the project (a search on the project alone).
func TestTickReadsUseIndexes(t *testing.T) {
	s := openTest(t)
	plan := queryPlan(t, s, tickSelect, "p", "[]")
	for _, line := range plan {
		if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "json_each") && line != "SCAN x" && line != "SCAN down" && line != "SCAN ids" ||
			strings.HasSuffix(line, "(project=?)") && !strings.Contains(line, "attempts_uncollected") {
			t.Errorf("the tick's read walks a whole project: %q in\n%s", line, strings.Join(plan, "\n"))
		}
	}
	for _, tc := range []struct {
		query, index string
		args         []any
	}{
		{`SELECT task FROM task_deps WHERE project = 'p' AND dep = 'A'`, "task_deps_dep", nil},
		{`SELECT MIN(not_before) FROM tasks WHERE project = 'p' AND status = 'pending' AND not_before > 'x'`, "tasks_due", nil},
		{`SELECT status, n FROM task_counts WHERE project = 'p'`, "sqlite_autoindex_task_counts_1", nil},
		{liveModesSQL, "attempts_live", nil},
		{uncollectedCurrentSQL, "attempts_uncollected", []any{"p", "completed", "failed", "killed"}},
		{liveWorkSQL, "attempts_uncollected", []any{"p", "claimed", "running", "p", "completed", "failed", "killed"}},
		{strings.ReplaceAll(strings.ReplaceAll(runnableSQL, "?1", "'p'"), "?2", "'x'") + " LIMIT 8", "tasks_ready", nil},
	} {
		plan := queryPlan(t, s, tc.query, tc.args...)
		if text := strings.Join(plan, "; "); !strings.Contains(text, "INDEX "+tc.index) {
			t.Errorf("%s: plan %q does not use %s", tc.query, text, tc.index)
		}
	}
}

// TestTaskVersions: every change to a task row gives it a version no row
// of the database had before, and a tick reads again only the rows whose
// version moved: the others are the values the caller holds.
func TestTaskVersions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	addTask(t, s, "p", "S01")
	addTask(t, s, "p", "S02")
	addTask(t, s, "q", "S01")
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET status = 'running' WHERE id = 'S01' OR id = 'S02'`); err != nil {
		t.Fatal(err)
	}
	held := map[string]*domain.Task{}
	versions := map[string]int64{}
	reads := 0
	tick := func() TickRead {
		t.Helper()
		var r TickRead
		err := s.Update(ctx, func(tx *Tx) error {
			var err error
			r, err = tx.TickTasks(ctx, "p", nil, s.Now(), func(id string, v int64) *domain.Task {
				if versions[id] == v {
					return held[id]
				}
				return nil
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range r.Tasks {
			if held[tk.ID] != tk {
				reads++
			}
			held[tk.ID], versions[tk.ID] = tk, r.Versions[tk.ID]
		}
		return r
	}
	if tick(); reads != 2 {
		t.Fatalf("first tick read %d rows, want 2", reads)
	}
	if tick(); reads != 2 {
		t.Fatalf("a tick with nothing changed read %d rows again", reads-2)
	}
	seen := map[int64]bool{versions["S01"]: true, versions["S02"]: true}
	// A heartbeat written by Beats is no new version: the holder sets it
	// as written.
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.Beats(ctx, "p", map[string]string{"S02": "7"}, s.Now())
	}); err != nil {
		t.Fatal(err)
	}
	if tick(); reads != 2 {
		t.Fatalf("a heartbeat alone read %d rows again", reads-2)
	}
	for _, stmt := range []string{`UPDATE tasks SET heartbeat = '8', updated_at = 'z' WHERE project = 'p' AND id = 'S02'`,
		`UPDATE tasks SET warning = 'w' WHERE project = 'p' AND id = 'S02'`,
		`UPDATE tasks SET status = 'running', heartbeat = '8' WHERE project = 'p' AND id = 'S02'`} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
		before := reads
		r := tick()
		if reads != before+1 || r.Tasks[1].Heartbeat != "8" || seen[versions["S02"]] {
			t.Fatalf("after %s: read %d rows, heartbeat %q, version %d (seen before: %v)", stmt, reads-before, r.Tasks[1].Heartbeat, versions["S02"], seen[versions["S02"]])
		}
		seen[versions["S02"]] = true
	}
}

// TestBeats: a tick's heartbeats land in one statement, each on its task,
// with the time they were seen; a task that is not there is an error.
func TestBeats(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	addTask(t, s, "p", "S01")
	addTask(t, s, "p", "S02")
	at := s.Now().Add(-time.Second)
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.Beats(ctx, "p", map[string]string{"S01": "7", "S02": "9"}, at)
	}); err != nil {
		t.Fatal(err)
	}
	for id, hb := range map[string]string{"S01": "7", "S02": "9"} {
		tk, err := s.Task(ctx, "p", id)
		if err != nil || tk.Heartbeat != hb || !tk.HeartbeatAt.Equal(at) {
			t.Errorf("%s: heartbeat %q at %v (%v), want %q at %v", id, tk.Heartbeat, tk.HeartbeatAt, err, hb, at)
		}
	}
	err := s.Update(ctx, func(tx *Tx) error { return tx.Beats(ctx, "p", map[string]string{"S01": "8", "GONE": "1"}, at) })
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("a beat of a task that is not there: %v, want ErrNotFound", err)
	}
}

// TestTaskVersionsCoverEveryColumn: the version trigger lists every column
// of tasks but heartbeat, heartbeat_at and version itself: a column added later and left out would change rows
// without a new version, and the controller would decide over old values.
func TestTaskVersionsCoverEveryColumn(t *testing.T) {
	s := openTest(t)
	var sql string
	if err := s.db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'task_version_update'`).Scan(&sql); err != nil {
		t.Fatal(err)
	}
	cols, err := queryRows(context.Background(), s.db, func(r scanner) (string, error) {
		var cid, notnull, pk int
		var name, typ string
		var dflt any
		return name, r.Scan(&cid, &name, &typ, &notnull, &dflt, &pk)
	}, `PRAGMA table_info(tasks)`)
	if err != nil {
		t.Fatal(err)
	}
	sql = strings.Join(strings.Fields(sql), " ")
	list := sql[strings.Index(sql, " UPDATE OF ")+11 : strings.Index(sql, " ON tasks")]
	listed := map[string]bool{}
	for _, c := range strings.Split(list, ",") {
		listed[strings.TrimSpace(c)] = true
	}
	for _, c := range cols {
		skip := c == "heartbeat" || c == "heartbeat_at" || c == "version"
		if listed[c] == skip {
			t.Errorf("column %s: listed by task_version_update %v, want %v", c, listed[c], !skip)
		}
	}
}

// queryPlan is SQLite's plan for query, one line a step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	plan, err := queryRows(context.Background(), s.db, func(r scanner) (string, error) {
		var id, parent, notused int
		var detail string
		return detail, r.Scan(&id, &parent, &notused, &detail)
	}, "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestProjectStamps: a project's stamp moves with every write a tick's
// read of it could see — a task inserted, changed or deleted, an attempt
// inserted, changed or deleted, a dependency added or removed — and with
// no write to another project, nor with a heartbeat.
func TestProjectStamps(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	addTask(t, s, "p", "A")
	addTask(t, s, "q", "A")
	stamp := func(project string) int64 {
		t.Helper()
		var n int64
		if err := s.Update(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.Stamp(ctx, project)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec := func(q string) func() {
		return func() {
			t.Helper()
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, step := range []struct {
		name  string
		write func()
		moves bool
	}{
		{"a task inserted", func() { addTask(t, s, "p", "B") }, true},
		{"a task changed", exec(`UPDATE tasks SET warning = 'w' WHERE project = 'p' AND id = 'A'`), true},
		{"a heartbeat", func() {
			if err := s.Update(ctx, func(tx *Tx) error { return tx.Beats(ctx, "p", map[string]string{"A": "b"}, s.Now()) }); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another project's task", exec(`UPDATE tasks SET warning = 'w' WHERE project = 'q'`), false},
		{"an attempt inserted", exec(`INSERT INTO attempts (project, task, attempt, node, status) VALUES ('p', 'A', 1, 'n', 'running')`), true},
		{"an attempt changed", exec(`UPDATE attempts SET collected_at = 'x' WHERE project = 'p'`), true},
		{"an attempt deleted", exec(`DELETE FROM attempts WHERE project = 'p'`), true},
		{"a dependency added", exec(`INSERT INTO task_deps (project, task, dep) VALUES ('p', 'B', 'A')`), true},
		{"a dependency removed", exec(`DELETE FROM task_deps WHERE project = 'p'`), true},
		{"a task deleted", exec(`DELETE FROM tasks WHERE project = 'p' AND id = 'B'`), true},
		{"another project's attempt", exec(`INSERT INTO attempts (project, task, attempt, node, status) VALUES ('q', 'A', 1, 'n', 'running')`), false},
	} {
		before := stamp("p")
		step.write()
		if moved := stamp("p") != before; moved != step.moves {
			t.Errorf("%s: stamp moved %v, want %v", step.name, moved, step.moves)
		}
	}
}
