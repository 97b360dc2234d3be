package store

import (
	"context"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestTaskNetwork: a task's network is kept, read back, changed by
// SetTask and archived with its run (migration 0014).
func TestTaskNetwork(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, domain.Task{Project: "p", ID: "S01", Title: "a", Type: "implementation", Priority: 5, SpecHash: "h", Snapshot: []byte("x"), Network: "none"}); err != nil {
			return err
		}
		return tx.InsertTask(ctx, domain.Task{Project: "p", ID: "S02", Title: "b", Type: "implementation", Priority: 5, SpecHash: "h", Snapshot: []byte("x")})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range map[string]string{"S01": "none", "S02": ""} {
		got, err := s.Task(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Network != w || got.Attempt != 0 {
			t.Errorf("%s: network %q attempt %d, want %q and 0", id, got.Network, got.Attempt, w)
		}
	}
	open := "open"
	if err := s.Update(ctx, func(tx *Tx) error { return tx.SetTask(ctx, "p", "S02", TaskPatch{Network: &open}) }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Task(ctx, "p", "S02"); err != nil || got.Network != open {
		t.Errorf("S02 after SetTask: %q, %v; want %q", got.Network, err, open)
	}
	if err := s.Update(ctx, func(tx *Tx) error { _, err := tx.BeginRun(ctx, "p", "{}", "again"); return err }); err != nil {
		t.Fatal(err)
	}
	var archived string
	if err := s.db.QueryRow("SELECT network FROM run_tasks WHERE project = 'p' AND id = 'S01'").Scan(&archived); err != nil {
		t.Fatal(err)
	}
	if archived != "none" {
		t.Errorf("the archived task's network: %q, want none", archived)
	}
}
