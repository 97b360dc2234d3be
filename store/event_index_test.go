package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
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
