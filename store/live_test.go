package store

import (
	"context"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestLive: a node's claimed and running tasks of the served projects,
// read through the (status, node) index, not a scan of every task.
func TestLive(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, id := range []string{"A", "B", "C", "D"} {
		addTask(t, s, "p", id)
	}
	addTask(t, s, "q", "A")
	if err := s.Update(ctx, func(tx *Tx) error {
		for _, c := range []struct{ project, id, node string }{{"p", "A", "n1"}, {"p", "B", "n1"}, {"p", "C", "n2"}, {"p", "D", "n1"}, {"q", "A", "n1"}} {
			if _, err := tx.Claim(ctx, c.project, c.id, c.node); err != nil {
				return err
			}
		}
		if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: "B", From: domain.Claimed, To: domain.Running}); err != nil {
			return err
		}
		_, _, err := tx.Transition(ctx, Change{Project: "p", Task: "D", From: domain.Claimed, To: domain.Failed})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node     string
		projects []string
		want     string
	}{
		{"n1", []string{"p", "q"}, "p/A p/B q/A"},
		{"n1", []string{"p"}, "p/A p/B"},
		{"n2", []string{"p", "q"}, "p/C"},
		{"n3", []string{"p"}, ""},
		{"n1", nil, "p/A p/B q/A"},
	} {
		got, err := s.Live(ctx, tc.projects)
		if err != nil || strings.Join(got[tc.node], " ") != tc.want {
			t.Errorf("Live(%v)[%s] = %v, %v; want %q", tc.projects, tc.node, got[tc.node], err, tc.want)
		}
	}
	plan := queryPlan(t, s, liveSQL, domain.Claimed, domain.Running)
	if text := strings.Join(plan, "; "); !strings.Contains(text, "INDEX tasks_status_node") {
		t.Errorf("plan %q does not use tasks_status_node", text)
	}
}

// TestLiveCounts: a tick's busy slots and api_mode use are read again only
// when the change counter moved: a steady tick (heartbeats written, nothing
// else) runs one statement for them, not a scan of every live row each;
// a claim, a transition or an attempt's change gives the new counts.
func TestLiveCounts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, id := range []string{"A", "B", "C"} {
		addTask(t, s, "p", id)
	}
	read := func(last *LiveCounts) (c *LiveCounts, statements int64) {
		t.Helper()
		before := stmtsRun.Load()
		err := s.Update(ctx, func(tx *Tx) error {
			before = stmtsRun.Load() // the transaction's own statements are not the read's
			var err error
			c, err = tx.LiveCounts(ctx, last)
			statements = stmtsRun.Load() - before
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c, statements
	}
	update := func(fn func(tx *Tx) error) {
		t.Helper()
		if err := s.Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx *Tx) error {
		if _, err := tx.ClaimAttempt(ctx, "p", "A", "n1", AttemptInit{APIMode: "m1"}); err != nil {
			return err
		}
		_, err := tx.Claim(ctx, "p", "B", "n2")
		return err
	})
	first, _ := read(nil)
	if first.Busy["n1"] != 1 || first.Busy["n2"] != 1 || first.Modes["m1"] != 1 || len(first.Modes) != 1 {
		t.Fatalf("counts %+v, want n1 and n2 busy, one attempt of m1", first)
	}
	update(func(tx *Tx) error { return tx.Beats(ctx, "p", map[string]string{"A": "h2"}, tx.now) })
	again, statements := read(first)
	if again != first || statements != 1 {
		t.Errorf("a read at an unchanged counter ran %d statements (same counts: %v), want 1 (the counter) and the counts kept", statements, again == first)
	}
	update(func(tx *Tx) error {
		_, err := tx.ClaimAttempt(ctx, "p", "C", "n1", AttemptInit{APIMode: "m1"})
		return err
	})
	claimed, _ := read(again)
	if claimed == again || claimed.Busy["n1"] != 2 || claimed.Modes["m1"] != 2 {
		t.Errorf("after a claim: %+v, want n1 with 2 busy and 2 attempts of m1", claimed)
	}
	update(func(tx *Tx) error {
		_, _, err := tx.Transition(ctx, Change{Project: "p", Task: "A", From: domain.Claimed, To: domain.Failed})
		return err
	})
	failed, _ := read(claimed)
	if failed.Busy["n1"] != 1 {
		t.Errorf("after a failure: n1 has %d busy, want 1", failed.Busy["n1"])
	}
	update(func(tx *Tx) error {
		return tx.SetAttempt(ctx, "p", "C", 1, AttemptPatch{Status: new(domain.Failed)})
	})
	if ended, _ := read(failed); ended.Modes["m1"] != failed.Modes["m1"]-1 {
		t.Errorf("after C's attempt ended: %d attempts of m1, want %d", ended.Modes["m1"], failed.Modes["m1"]-1)
	}
}
