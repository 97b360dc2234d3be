package controller

import (
	"slices"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestDecideDownstream: what retry --downstream touches: the named task
// and every author task after it, but those already waiting to run.
func TestDecideDownstream(t *testing.T) {
	task := func(id string, st domain.Status, deps ...string) domain.Task {
		return domain.Task{ID: id, Status: st, DependsOn: deps}
	}
	byID := func(ts ...domain.Task) map[string]domain.Task {
		m := map[string]domain.Task{}
		for _, t := range ts {
			m[t.ID] = t
		}
		return m
	}
	cases := []struct {
		name            string
		tasks           map[string]domain.Task
		ids             []string
		retry, wantWait []string
	}{
		{"a chain, all done: everything after it",
			byID(task("S01", domain.Completed), task("S02", domain.Completed, "S01"), task("S03", domain.Completed, "S02"), task("S04", domain.Completed)),
			[]string{"S01"}, []string{"S01", "S02", "S03"}, nil},
		{"a pending dependent is left to take the new result",
			byID(task("S01", domain.Failed), task("S02", domain.Pending, "S01"), task("S03", domain.Blocked, "S01")),
			[]string{"S01"}, []string{"S01", "S03"}, []string{"S02"}},
		{"a running dependent stays in, for retry to refuse",
			byID(task("S01", domain.Completed), task("S02", domain.Running, "S01")),
			[]string{"S01"}, []string{"S01", "S02"}, nil},
		{"the phase tasks are retry's to handle",
			byID(task("S01", domain.Completed), task("S99", domain.Completed), task("V01", domain.Failed)),
			[]string{"S01"}, []string{"S01"}, nil},
		{"a named pending task stays named (retry refuses it)",
			byID(task("S01", domain.Pending), task("S02", domain.Completed, "S01")),
			[]string{"S01"}, []string{"S01", "S02"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			retry, waiting := decideDownstream(tc.tasks, tc.ids)
			if !slices.Equal(retry, tc.retry) || !slices.Equal(waiting, tc.wantWait) {
				t.Errorf("decideDownstream = %v, waiting %v; want %v, waiting %v", retry, waiting, tc.retry, tc.wantWait)
			}
		})
	}
}
