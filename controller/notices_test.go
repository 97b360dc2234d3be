package controller

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestNoticesDecided: the decisions that call for a message say so once:
// one per paused api_mode and project in a tick however many of its tasks
// hit the limit, none for a budget with nothing left to cancel
// (TestApplyDecisions has the budget that cancels).
func TestNoticesDecided(t *testing.T) {
	t.Parallel()
	ended, task := endedStatus, decideTask
	tests := []struct {
		name  string
		tasks []domain.Task
		pulls map[string]any
		runs  map[attemptKey]attemptFacts
		opts  domain.ProjectOptions
		spent float64
		want  []string
	}{
		{
			name:  "two tasks limited under one mode: one message",
			tasks: []domain.Task{task("S01", domain.Running, "n1", 1), task("S02", domain.Running, "n1", 1)},
			pulls: map[string]any{"n1": []wire.TaskStatus{ended("S01", 1, wire.StatusFailed, wire.ClassRateLimit),
				ended("S02", 1, wire.StatusFailed, wire.ClassRateLimit)}},
			runs: map[attemptKey]attemptFacts{{"p", "S01", 1}: {mode: "team"}, {"p", "S02", 1}: {mode: "team"}},
			want: []string{notify.ModePaused + " p: api_mode team paused until "},
		},
		{
			name:  "a budget with nothing left to cancel",
			tasks: []domain.Task{task("S01", domain.Completed, "n1", 1), task("S02", domain.Canceled, "", 0)},
			pulls: map[string]any{"n1": []wire.TaskStatus{}},
			opts:  domain.ProjectOptions{BudgetUSD: 1},
			spent: 2,
		},
	}
	for _, tt := range tests {
		c := decider(t, decideNodes)
		snap := wholeSnapshot(tt.tasks, projectFacts{opts: tt.opts, usd: tt.spent}, tt.runs)
		plan := c.decideApply(snap, nodeSays(tt.pulls), nil, nil, t0)
		var got []string
		for _, n := range plan.notices {
			got = append(got, n.event+" "+n.project+": "+n.message)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: notices %q, want %q", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tt.want[i]) {
				t.Errorf("%s: notice %q, want %q…", tt.name, got[i], tt.want[i])
			}
		}
	}
}
