package store

import (
	"context"
	"errors"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// complete claims a task on n1 and completes it with a cost and one file.
func complete(t *testing.T, s *Store, project, id string, cost float64) int {
	t.Helper()
	ctx := context.Background()
	var attempt int
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		if attempt, err = tx.Claim(ctx, project, id, "n1"); err != nil {
			return err
		}
		if _, _, err := tx.Transition(ctx, Change{Project: project, Task: id, From: domain.Claimed, To: domain.Completed}); err != nil {
			return err
		}
		if err := tx.SetAttempt(ctx, project, id, attempt, AttemptPatch{Status: new(domain.Completed), CostUSD: new(cost)}); err != nil {
			return err
		}
		return tx.ReplaceFiles(ctx, project, id, attempt, []File{{Project: project, Task: id, Attempt: attempt, Path: id + ".txt", Size: 1, SHA256: "x"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	return attempt
}

func TestRunsArchiveAndReadBack(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	addTask(t, s, "p", "S02")
	complete(t, s, "p", "S01", 0.25)
	complete(t, s, "p", "S02", 0.5)
	if err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.PutConflicts(ctx, "p", []Conflict{{Path: "a", Tasks: []string{"S01", "S02"}}}); err != nil {
			return err
		}
		return tx.SetProject(ctx, "p", ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultPassed)}, "")
	}); err != nil {
		t.Fatal(err)
	}

	var run int
	if err := s.Update(ctx, func(tx *Tx) error {
		var err error
		if run, err = tx.BeginRun(ctx, "p", `{"x":1}`, "run 2 started"); err != nil {
			return err
		}
		t1, err := tx.Task(ctx, "p", "S01")
		if err != nil {
			return err
		}
		t1.Title = "renamed in the spec"
		if err := tx.Reuse(ctx, t1, 1); err != nil {
			return err
		}
		t2, err := tx.Task(ctx, "p", "S02")
		if err != nil {
			return err
		}
		t2.Title = "new title"
		return tx.RunAgain(ctx, t2, "spec changed")
	}); err != nil {
		t.Fatal(err)
	}
	if run != 2 {
		t.Fatalf("BeginRun = %d, want 2", run)
	}
	// The rerun's attempt numbers go on from run 1's.
	if a := complete(t, s, "p", "S02", 1); a != 2 {
		t.Errorf("S02's first attempt of run 2 is #%d, want #2", a)
	}

	// A reused task takes its spec's settings now; a claim (a retry) makes
	// it a task of this run.
	if tk, _ := s.Task(ctx, "p", "S01"); tk.Title != "renamed in the spec" || tk.ReusedFrom != 1 || tk.Attempt != 1 {
		t.Errorf("reused S01 = %+v", tk)
	}
	cur, err := s.Project(ctx, "p")
	if err != nil || cur.Run != 2 || cur.State != domain.ProjectActive || cur.Result != "" {
		t.Fatalf("current project = %+v, %v", cur, err)
	}
	if usd, _, _ := s.Spent(ctx, "p"); usd != 1 {
		t.Errorf("run 2 spent %v, want 1 (run 1's 0.75 is not counted against it)", usd)
	}

	old, n, err := s.AtRun(ctx, "p", 1)
	if err != nil || n != 1 {
		t.Fatalf("AtRun(1) = %d, %v", n, err)
	}
	p1, err := old.Project(ctx, "p")
	if err != nil || p1.Run != 1 || p1.Result != domain.ResultPassed || p1.State != domain.ProjectDone {
		t.Errorf("run 1's project = %+v, %v", p1, err)
	}
	tasks, err := old.Tasks(ctx, "p")
	if err != nil || len(tasks) != 2 || tasks[1].Title != "t S02" || tasks[1].Status != domain.Completed {
		t.Errorf("run 1's tasks = %+v, %v", tasks, err)
	}
	// The spec text is archived once per hash, not copied with each run.
	if b, err := old.Snapshot(ctx, "p", "S02"); err != nil || string(b) != "echo\n" {
		t.Errorf("run 1's snapshot of S02 = %q, %v", b, err)
	}
	var copied, kept int
	if err := s.db.QueryRow("SELECT TOTAL(length(snapshot)) FROM run_tasks").Scan(&copied); err != nil || copied != 0 {
		t.Errorf("run_tasks holds %d bytes of spec text (%v), want none", copied, err)
	}
	if err := s.db.QueryRow("SELECT COUNT(*) FROM run_snapshots").Scan(&kept); err != nil || kept != 1 {
		t.Errorf("run_snapshots has %d rows (%v), want 1 (two tasks, one text)", kept, err)
	}
	if usd, _, _ := old.Spent(ctx, "p"); usd != 0.75 {
		t.Errorf("run 1 spent %v, want 0.75", usd)
	}
	if cs, _ := old.Conflicts(ctx, "p"); len(cs) != 1 {
		t.Errorf("run 1 conflicts = %v", cs)
	}
	if fs, _ := old.Files(ctx, "p", "S02"); len(fs) != 1 || fs[0].Attempt != 1 {
		t.Errorf("run 1 files of S02 = %+v", fs)
	}
	evs, _ := old.Events(ctx, "p", 0, 0)
	for _, e := range evs {
		if e.Kind == "rerun" || e.Kind == "reused" {
			t.Errorf("run 1's events hold run 2's %s", e.Kind)
		}
	}
	evs, _ = s.Events(ctx, "p", 0, 0)
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if kinds["rerun"] != 1 || kinds["reused"] != 1 || kinds["created"] != 0 {
		t.Errorf("run 2's events = %v", kinds)
	}

	hist, err := s.RunHistory(ctx, "p")
	if err != nil || len(hist) != 2 {
		t.Fatalf("RunHistory = %+v, %v", hist, err)
	}
	if h := hist[0]; h.Ran != 2 || h.Reused != 0 || h.CostUSD != 0.75 || h.Project.Result != domain.ResultPassed {
		t.Errorf("run 1 = %+v", h)
	}
	if h := hist[1]; h.Ran != 1 || h.Reused != 1 || h.CostUSD != 1 || h.Project.Run != 2 {
		t.Errorf("run 2 = %+v", h)
	}
	var rangeErr *RunRangeError
	if _, _, err := s.AtRun(ctx, "p", 3); !errors.As(err, &rangeErr) || rangeErr.Latest != 2 {
		t.Errorf("AtRun(3) = %v, want a RunRangeError naming run 2", err)
	}
	if same, n, err := s.AtRun(ctx, "p", 2); err != nil || same != s || n != 2 {
		t.Errorf("AtRun(2) = %v, %d, %v: want the live store", same, n, err)
	}
}

// A phase task removed and made again in a later run numbers its attempts
// on from the last one ever recorded, and removing it keeps the attempts
// of the runs before.
func TestRecreatedTaskAttemptsGoOn(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S99")
	complete(t, s, "p", "S99", 0)
	complete2 := func() {
		if err := s.Update(ctx, func(tx *Tx) error {
			if _, err := tx.BeginRun(ctx, "p", "{}", ""); err != nil {
				return err
			}
			return tx.DeleteTasks(ctx, "p", []string{"S99"}, "a new run")
		}); err != nil {
			t.Fatal(err)
		}
	}
	complete2()
	addTask(t, s, "p", "S99")
	if a := complete(t, s, "p", "S99", 0); a != 2 {
		t.Errorf("S99 made again starts at attempt #%d, want #2", a)
	}
	// Removed within its run (a retry makes the phase start over), its
	// attempts deleted with it: the numbers still go on.
	if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteTasks(ctx, "p", []string{"S99"}, "the phase starts over") }); err != nil {
		t.Fatal(err)
	}
	addTask(t, s, "p", "S99")
	if a := complete(t, s, "p", "S99", 0); a != 3 {
		t.Errorf("S99 made again in the same run starts at attempt #%d, want #3", a)
	}
	if tk, _ := s.Task(ctx, "p", "S99"); tk.ReusedFrom != 0 {
		t.Errorf("a claimed task is still marked reused: %+v", tk)
	}
	if runs, _ := s.Attempts(ctx, "p", "S99"); len(runs) != 2 || runs[0].Run != 1 || runs[1].Run != 2 {
		t.Errorf("attempts of S99 = %+v", runs)
	}
}
