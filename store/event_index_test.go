package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// The event lookups made for every collection and every status read an
// index (migration 0015), not every event of the run: with thousands of
// tasks a scan made each collection cost in proportion to the events
// recorded so far.
func TestEventLookupsUseAnIndex(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name, query, index string
		args               []any
	}{
		{"CountEvents", countEventsSQL, "events_task", []any{"p", "T", 1, "collect_failed"}},
		{"LastEvent", lastEventSQL(0, 2), "events_kind", []any{"p", "notify", "notify_failed"}},
	} {
		rows, err := s.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tc.query, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "; ")
		if !strings.Contains(text, "USING INDEX "+tc.index) && !strings.Contains(text, "USING COVERING INDEX "+tc.index) {
			t.Errorf("%s: plan %q does not use %s", tc.name, text, tc.index)
		}
	}
}

// The dependency rows follow depends_on (migration 0016's triggers):
// a task inserted, its dependencies changed, deleted; a damaged depends_on
// gets a dependency no task completes, so the task is never runnable as if
// it had none; readiness reads the rows through their index.
func TestTaskDepsFollowDependsOn(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	deps := func(id string) string {
		t.Helper()
		rows, err := s.db.QueryContext(ctx, "SELECT dep FROM task_deps WHERE project = 'p' AND task = ? ORDER BY dep", id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var d string
			rows.Scan(&d)
			out = append(out, d)
		}
		return strings.Join(out, ",")
	}
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		for _, tk := range []domain.Task{{ID: "A"}, {ID: "B", DependsOn: []string{"A"}}, {ID: "C", DependsOn: []string{"A", "B"}}} {
			tk.Project, tk.Title, tk.Type, tk.SpecHash, tk.Snapshot = "p", tk.ID, "implementation", "h", []byte("x")
			if err := tx.InsertTask(ctx, tk); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := deps("A") + "|" + deps("B") + "|" + deps("C"); got != "|A|A,B" {
		t.Fatalf("after insert: %q", got)
	}
	if _, err := s.db.Exec(`UPDATE tasks SET depends_on = '["B"]' WHERE id = 'C'`); err != nil {
		t.Fatal(err)
	}
	if got := deps("C"); got != "B" {
		t.Errorf("after update: %q", got)
	}
	if _, err := s.db.Exec(`DELETE FROM tasks WHERE id = 'B'`); err != nil {
		t.Fatal(err)
	}
	if got := deps("B"); got != "" {
		t.Errorf("after delete: %q", got)
	}
	if _, err := s.db.Exec(`UPDATE tasks SET depends_on = '["A' WHERE id = 'C'`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM task_deps WHERE project = 'p' AND task = 'C' AND dep = ''`).Scan(&n); err != nil || n != 1 {
		t.Errorf("a damaged depends_on has %d rows naming no task (%v), want 1", n, err)
	}
	if _, err := s.db.Exec(`UPDATE tasks SET status = ? WHERE id = 'A'`, domain.Completed); err != nil {
		t.Fatal(err)
	}
	ts, err := s.Runnable(ctx, "p", s.Now(), 10)
	for _, x := range ts {
		if x.ID == "C" {
			t.Errorf("the task with a damaged depends_on is runnable")
		}
	}
	_ = err // the damaged row may also fail the read: either way it does not run
	plan := queryPlan(t, s, `SELECT 1 FROM task_deps AS d WHERE d.project = 'p' AND d.task = 'C'`)
	if text := strings.Join(plan, "; "); !strings.Contains(text, "task_deps_task") {
		t.Errorf("dependency rows read without their index: %s", text)
	}
}
