package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestStatementsCompiledOnce: a task's whole life (added, claimed, running,
// its attempt, an event, completed) compiles its statements for the first
// tasks only (the second adds to a project that exists); the next tasks'
// reuse them (issue 35: compiling was a third
// of the controller's CPU per no-op task).
func TestStatementsCompiledOnce(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	life := func(id string) {
		addTask(t, s, "p", id)
		err := s.Update(ctx, func(tx *Tx) error {
			attempt, err := tx.Claim(ctx, "p", id, "n1")
			if err != nil {
				return err
			}
			if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: id, From: domain.Claimed, To: domain.Running}); err != nil {
				return err
			}
			if err := tx.SetAttempt(ctx, "p", id, attempt, AttemptPatch{Status: new(domain.Running), PID: new(42)}); err != nil {
				return err
			}
			if err := tx.Event(ctx, Event{Project: "p", Task: id, Attempt: attempt, Kind: "warning", Message: "m"}); err != nil {
				return err
			}
			_, _, err = tx.Transition(ctx, Change{Project: "p", Task: id, From: domain.Running, To: domain.Completed})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Task(ctx, "p", id); err != nil {
			t.Fatal(err)
		}
	}
	life("S01")
	life("S02")
	first := stmtsCompiled.Load()
	for i := 3; i <= 6; i++ {
		life(fmt.Sprintf("S%02d", i))
	}
	if first == 0 {
		t.Fatal("the store's connection keeps no statement: every call compiles its SQL again")
	}
	if got := stmtsCompiled.Load(); got != first {
		t.Errorf("four more tasks compiled %d statements more; want none", got-first)
	}
}

// TestStatementInUseRunsAgain: a query run again while its first rows are
// still open (a kept statement is busy) gets its own statement, and both
// read every row.
func TestStatementInUseRunsAgain(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, id := range []string{"S01", "S02", "S03"} {
		addTask(t, s, "p", id)
	}
	const q = "SELECT id FROM tasks WHERE project = ? ORDER BY id"
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		outer, err := tx.QueryContext(ctx, q, "p")
		if err != nil {
			return err
		}
		defer outer.Close()
		var got []string
		for outer.Next() {
			var id string
			if err := outer.Scan(&id); err != nil {
				return err
			}
			inner := 0
			rows, err := tx.QueryContext(ctx, q, "p")
			if err != nil {
				return err
			}
			for rows.Next() {
				inner++
			}
			rows.Close()
			if inner != 3 {
				t.Errorf("inner query read %d rows, want 3", inner)
			}
			got = append(got, id)
		}
		if fmt.Sprint(got) != "[S01 S02 S03]" {
			t.Errorf("outer query read %v, want [S01 S02 S03]", got)
		}
		return outer.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}
