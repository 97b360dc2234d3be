package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// threeRuns makes runs 1 to 3 of p: S01 completes in run 1 and is reused
// by runs 2 and 3; S02 runs again in each (attempts 1, 2, 3).
func threeRuns(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	addTask(t, s, "p", "S01")
	addTask(t, s, "p", "S02")
	complete(t, s, "p", "S01", 0.25)
	complete(t, s, "p", "S02", 0.5)
	for run := 2; run <= 3; run++ {
		err := s.Update(ctx, func(tx *Tx) error {
			if err := tx.SetProject(ctx, "p", ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultPassed)}, ""); err != nil {
				return err
			}
			if _, err := tx.BeginRun(ctx, "p", "{}", "next run"); err != nil {
				return err
			}
			t1, err := tx.Task(ctx, "p", "S01")
			if err != nil {
				return err
			}
			if err := tx.Reuse(ctx, t1, 1); err != nil {
				return err
			}
			t2, err := tx.Task(ctx, "p", "S02")
			if err != nil {
				return err
			}
			return tx.RunAgain(ctx, t2, "spec changed")
		})
		if err != nil {
			t.Fatal(err)
		}
		complete(t, s, "p", "S02", 1)
	}
}

func count(t *testing.T, s *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestPruneRuns: pruning runs 1 and 2 removes their rows but S01's
// attempt, which run 3 reuses; done again it removes nothing more; the
// runs are no longer listed or readable; attempt numbers go on.
func TestPruneRuns(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	threeRuns(t, s)
	gone := []int{1, 2}
	p1, err := s.PruneOf(ctx, "p", 1, gone)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Attempts) != 1 || p1.Attempts[0].Task != "S02" || p1.Attempts[0].Attempt != 1 || p1.Attempts[0].Node != "n1" {
		t.Errorf("run 1's pruned attempts = %+v, want S02#1 alone (S01#1 is reused by run 3)", p1.Attempts)
	}
	if p1.Rows["attempts"] != 1 || p1.Rows["run_tasks"] != 2 || p1.Rows["project_runs"] != 1 || p1.Rows["run_files"] != 2 || p1.Rows["events"] == 0 {
		t.Errorf("run 1's rows = %v", p1.Rows)
	}
	// Events stay append-only for runs not being pruned.
	if _, err := s.db.Exec("DELETE FROM events WHERE project = 'p' AND run = 1"); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("deleting events of a run not being pruned: %v", err)
	}
	if err := s.Update(ctx, func(tx *Tx) error { return tx.BeginPrune(ctx, "p", gone) }); err != nil {
		t.Fatal(err)
	}
	if hist, err := s.RunHistory(ctx, "p"); err != nil || len(hist) != 1 || hist[0].Project.Run != 3 {
		t.Errorf("RunHistory while pruning = %+v, %v", hist, err)
	}
	for i := 0; i < 2; i++ { // done again, it removes nothing more
		for _, n := range gone {
			if err := s.Update(ctx, func(tx *Tx) error { return tx.PruneRun(ctx, "p", n, gone) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []string{"project_runs", "run_tasks", "run_files", "run_conflicts", "run_verdicts", "events"} {
		if n := count(t, s, "SELECT COUNT(*) FROM "+q+" WHERE project = 'p' AND run IN (1, 2)"); n != 0 {
			t.Errorf("%s of runs 1 and 2: %d rows left", q, n)
		}
	}
	if n := count(t, s, "SELECT COUNT(*) FROM attempts WHERE project = 'p' AND run IN (1, 2)"); n != 1 {
		t.Errorf("attempts of runs 1 and 2 left: %d, want 1 (S01#1)", n)
	}
	if n := count(t, s, "SELECT COUNT(*) FROM attempts WHERE project = 'p' AND task = 'S01' AND attempt = 1"); n != 1 {
		t.Errorf("S01#1, reused by run 3, was deleted")
	}
	if st, _ := s.PruneStates(ctx, "p"); st[1] != PruneDone || st[2] != PruneDone || len(st) != 2 {
		t.Errorf("PruneStates = %v", st)
	}
	if _, _, err := s.AtRun(ctx, "p", 1); err == nil || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("AtRun(1) of a pruned run: %v", err)
	}
	if _, _, err := s.AtRun(ctx, "p", 2); err == nil {
		t.Errorf("AtRun(2) of a pruned run: no error")
	}
	// Run 3 reads as before; S02's next attempt is #4.
	if tk, err := s.Task(ctx, "p", "S01"); err != nil || tk.ReusedFrom != 1 || tk.Attempt != 1 {
		t.Errorf("S01 of run 3 = %+v, %v", tk, err)
	}
	if err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.SetProject(ctx, "p", ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultPassed)}, ""); err != nil {
			return err
		}
		if _, err := tx.BeginRun(ctx, "p", "{}", "run 4"); err != nil {
			return err
		}
		return tx.DeleteTasks(ctx, "p", []string{"S02"}, "gone from the specs")
	}); err != nil {
		t.Fatal(err)
	}
	addTask(t, s, "p", "S02")
	if a := complete(t, s, "p", "S02", 1); a != 4 {
		t.Errorf("S02's attempt after the prune is #%d, want #4", a)
	}
}

// TestTasksKeptOn: a task whose attempt stays keeps its task directory on
// the node that ran it.
func TestTasksKeptOn(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	threeRuns(t, s)
	kept, err := s.TasksKeptOn(ctx, "p", []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if !kept[[2]string{"S01", "n1"}] || !kept[[2]string{"S02", "n1"}] || len(kept) != 2 {
		t.Errorf("TasksKeptOn = %v", kept)
	}
}

// TestBranches: every run's tasks with the commits their attempts
// recorded, the current run's included; a reused task has the commit of
// the attempt it reuses; the bases its tasks started from.
func TestBranches(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	threeRuns(t, s)
	if _, err := s.db.Exec("UPDATE attempts SET result_commit = 'c' || task || '.' || attempt"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("UPDATE project_runs SET final_commit = 'f' || run"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("UPDATE run_tasks SET base_commit = 'b' || run"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("UPDATE tasks SET base_commit = 'b3' WHERE id = 'S02'"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Branches(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		1: "f1 map[S01:[cS01.1] S02:[cS02.1]] [b1]",
		2: "f2 map[S01:[cS01.1] S02:[cS02.2]] [b2]",
		3: " map[S01:[cS01.1] S02:[cS02.3]] [b3]",
	}
	if len(got) != 3 {
		t.Fatalf("Branches has runs %v", got)
	}
	for n, w := range want {
		if b := got[n]; b == nil || fmt.Sprint(b.Final, " ", b.Tasks, " ", b.Bases) != w {
			t.Errorf("run %d: %+v, want %s", n, b, w)
		}
	}
}
