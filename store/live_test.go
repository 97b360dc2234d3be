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
