package store

import (
	"strings"
	"testing"
)

// TestTaskEventsUseTheTaskIndex: a task's newest events are read from
// its own entries of events_task, whatever the run holds (the dashboard
// reads them for each task of a page).
func TestTaskEventsUseTheTaskIndex(t *testing.T) {
	st := openTest(t)
	for _, run := range []int{0, 2} {
		rows, err := st.db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+taskEventsSQL(run), "p", "t", 1)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var a, b, c int
			var d string
			if err := rows.Scan(&a, &b, &c, &d); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, d)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "\n"), "USING INDEX events_task") {
			t.Errorf("run %d: plan\n%s", run, strings.Join(plan, "\n"))
		}
	}
}
