package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/store"
)

// TestViewSaysWhyDisabled: a disabled schedule's entry says why — the
// breaker's reason as recorded, or the operator's when none is — and the
// command that enables it; an enabled one says neither.
func TestViewSaysWhyDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	home := t.TempDir()
	specs := filepath.Join(home, "specs")
	for _, p := range []string{"broken", "off", "on"} {
		if err := os.MkdirAll(filepath.Join(specs, p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(specs, p, "project.yaml"), []byte("tool: shell\nschedule: {every: 1h, max_failures: 2}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(specs, p, "S01-a.md"), []byte("true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(ctx, filepath.Join(home, "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs := []store.ScheduleState{
		{Project: "broken", Failures: 2, LastRun: 7, DisabledReason: BrokenReason("broken", 2, 7)},
		{Project: "off"},
		{Project: "on", Enabled: true},
	}
	if err := st.Update(ctx, func(tx *store.Tx) error {
		for _, r := range recs {
			if err := tx.PutSchedule(ctx, r); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	v, err := View(ctx, st, specs, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"broken": {"2 scheduled runs failed in a row (max_failures: 2, the last run 7): fix the project, then dispatch schedule enable broken", "dispatch schedule enable broken"},
		"off":    {"disabled by the operator: dispatch schedule enable off", "dispatch schedule enable off"},
		"on":     {"", ""},
	}
	if len(v.Schedules) != 3 {
		t.Fatalf("%+v", v.Schedules)
	}
	for _, e := range v.Schedules {
		if w := want[e.Project]; e.DisabledReason != w[0] || e.Enable != w[1] {
			t.Errorf("%s: %q, %q; want %q, %q", e.Project, e.DisabledReason, e.Enable, w[0], w[1])
		}
	}
}
