package store

import (
	"context"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// TestTaskLimits: a task's limits are kept, read back, and archived with
// its run (migration 0013).
func TestTaskLimits(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	want := yamlval.Limits{Memory: 4 << 30, CPU: 1.5, Pids: 512, FileSize: 8 << 30}
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, domain.Task{Project: "p", ID: "S01", Title: "a", Type: "implementation", Priority: 5, SpecHash: "h", Snapshot: []byte("x"), Limits: want}); err != nil {
			return err
		}
		return tx.InsertTask(ctx, domain.Task{Project: "p", ID: "S02", Title: "b", Type: "implementation", Priority: 5, SpecHash: "h", Snapshot: []byte("x")})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range map[string]yamlval.Limits{"S01": want, "S02": {}} {
		got, err := s.Task(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Limits != w {
			t.Errorf("%s: limits %+v, want %+v", id, got.Limits, w)
		}
	}
	other := yamlval.Limits{Memory: 1 << 20}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.SetTask(ctx, "p", "S02", TaskPatch{Limits: &other}) }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Task(ctx, "p", "S02"); err != nil || got.Limits != other {
		t.Errorf("S02 after SetTask: %+v, %v; want limits %+v", got.Limits, err, other)
	}
	if err := s.Update(ctx, func(tx *Tx) error { _, err := tx.BeginRun(ctx, "p", "{}", "again"); return err }); err != nil {
		t.Fatal(err)
	}
	var archived string
	if err := s.db.QueryRow("SELECT limits FROM run_tasks WHERE project = 'p' AND id = 'S01'").Scan(&archived); err != nil {
		t.Fatal(err)
	}
	if archived == "" {
		t.Error("the archived task lost its limits")
	}
}
