package store

import (
	"context"
	"testing"
)

// TestGateKnown: what a gate command found on the trees it gated is known
// across attempts and runs of the project — the newest run of each tree,
// no result that was itself reused or stopped, nothing of another command
// or project — so that no tree is gated twice.
func TestGateKnown(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	addTask(t, s, "p", "S01")
	addTask(t, s, "q", "S01")
	put := func(project string, attempt int, command, tree string, passed, reused bool, errText string) {
		t.Helper()
		if err := s.Update(ctx, func(tx *Tx) error {
			return tx.PutGateRun(ctx, GateRun{Project: project, Task: "S01", Attempt: attempt, Command: command, Tree: tree,
				Passed: passed, Reused: reused, Error: errText})
		}); err != nil {
			t.Fatal(err)
		}
	}
	put("p", 1, "make test", "git:a", false, false, "exit status 2")
	if _, err := s.db.ExecContext(ctx, `UPDATE projects SET run = 2 WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	put("p", 2, "make test", "git:a", true, false, "")         // a later run of the same tree
	put("p", 3, "make test", "git:a", true, true, "")          // reused: not a run of its own
	put("p", 4, "make test", "git:b", false, false, "stopped") // cut short: says nothing
	put("p", 5, "make vet", "git:c", true, false, "")          // another command
	put("q", 1, "make test", "git:d", true, false, "")         // another project
	known, err := s.GateKnown(ctx, "p", "make test", 10)
	if err != nil || len(known) != 1 || known[0].Tree != "git:a" || !known[0].Passed || known[0].Run != 2 {
		t.Fatalf("known = %+v, %v; want git:a as run 2 found it", known, err)
	}
	runs, err := s.GateRuns(ctx, "p", 1)
	if err != nil || len(runs) != 1 || runs[0].Attempt != 1 {
		t.Fatalf("run 1's gate runs = %+v, %v", runs, err)
	}
}

// TestAttemptFacts: one read gives an attempt's api_mode, whether its
// files were collected and whether its gate is recorded as running; an
// attempt with no row reads as none of them.
func TestAttemptFacts(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	addTask(t, s, "p", "S01")
	if _, err := s.db.ExecContext(ctx, `INSERT INTO attempts (project, task, attempt, node, status, api_mode, collected_at, gating)
		VALUES ('p', 'S01', 1, 'n', 'completed', 'team', '2026-01-02T03:04:05Z', 1), ('p', 'S01', 2, 'n', 'running', '', '', 0)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attempt           int
		mode              string
		collected, gating bool
	}{{1, "team", true, true}, {2, "", false, false}, {3, "", false, false}} {
		err := s.Update(ctx, func(tx *Tx) error {
			mode, collected, gating, err := tx.AttemptFacts(ctx, "p", "S01", tc.attempt)
			if err != nil || mode != tc.mode || collected != tc.collected || gating != tc.gating {
				t.Errorf("attempt %d: %q %v %v %v, want %q %v %v", tc.attempt, mode, collected, gating, err, tc.mode, tc.collected, tc.gating)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
