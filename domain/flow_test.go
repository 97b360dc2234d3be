package domain

import (
	"maps"
	"slices"
	"testing"
)

// TestStale: which tasks hold a result made from a dependency's result
// that is no longer the dependency's, and why.
func TestStale(t *testing.T) {
	task := func(id string, st Status, attempt int, deps ...string) Task {
		return Task{ID: id, Status: st, Attempt: attempt, DependsOn: deps}
	}
	g := func(id string, attempt int) Given { return Given{Task: id, Attempt: attempt} }
	cases := []struct {
		name  string
		tasks []Task
		given map[string][]Given
		want  map[string]string
	}{
		{"fresh: every dependent was given the current result",
			[]Task{task("S01", Completed, 1), task("S02", Completed, 1, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}}, map[string]string{}},
		{"dependency retried, waiting to run again",
			[]Task{task("S01", Pending, 1), task("S02", Completed, 1, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}},
			map[string]string{"S02": "S01 is pending again after this one was given attempt 1"}},
		{"dependency ran again and completed",
			[]Task{task("S01", Completed, 2), task("S02", Completed, 1, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}},
			map[string]string{"S02": "S01 ran again (attempt 2) after this one was given attempt 1"}},
		{"transitively: the dependent of a stale task is stale",
			[]Task{task("S01", Completed, 2), task("S02", Completed, 1, "S01"), task("S03", Completed, 1, "S02")},
			map[string][]Given{"S02": {g("S01", 1)}, "S03": {g("S02", 1)}},
			map[string]string{"S02": "S01 ran again (attempt 2) after this one was given attempt 1", "S03": "its dependency S02 is stale"}},
		{"a running dependent on an old result is stale",
			[]Task{task("S01", Running, 2), task("S02", Running, 1, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}},
			map[string]string{"S02": "S01 ran again (attempt 2) after this one was given attempt 1"}},
		{"a waiting, failed or blocked dependent is not",
			[]Task{task("S01", Completed, 2), task("S02", Pending, 1, "S01"), task("S03", Failed, 1, "S01"), task("S04", Blocked, 0, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}, "S03": {g("S01", 1)}},
			map[string]string{}},
		{"a dependent rerun on the new result is fresh again",
			[]Task{task("S01", Completed, 2), task("S02", Completed, 2, "S01")},
			map[string][]Given{"S02": {g("S01", 2)}}, map[string]string{}},
		{"nothing recorded (attempts before inputs were recorded): not stale",
			[]Task{task("S01", Completed, 2), task("S02", Completed, 1, "S01")},
			nil, map[string]string{}},
		{"a dependency gone from the project says nothing",
			[]Task{task("S02", Completed, 1, "S01")},
			map[string][]Given{"S02": {g("S01", 1)}}, map[string]string{}},
		{"matrix dependency: one of its tasks ran again",
			[]Task{task("S01.1", Completed, 1), task("S01.2", Completed, 3), task("S02", Completed, 1, "S01.1", "S01.2")},
			map[string][]Given{"S02": {g("S01.1", 1), g("S01.2", 2)}},
			map[string]string{"S02": "S01.2 ran again (attempt 3) after this one was given attempt 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Stale(tc.tasks, tc.given)
			if !maps.Equal(got, tc.want) {
				t.Errorf("Stale = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDownstream: what retry --downstream reruns.
func TestDownstream(t *testing.T) {
	task := func(id string, deps ...string) Task { return Task{ID: id, DependsOn: deps} }
	dag := []Task{task("S01"), task("S02.1", "S01"), task("S02.2", "S01"), task("S03", "S02.1", "S02.2"),
		task("S04"), task("S05", "S04", "S03"), task("S99")}
	cases := []struct {
		name string
		ids  []string
		want []string
	}{
		{"the root: everything after it, transitively, no phase task", []string{"S01"}, []string{"S01", "S02.1", "S02.2", "S03", "S05"}},
		{"a middle task", []string{"S02.2"}, []string{"S02.2", "S03", "S05"}},
		{"a leaf: itself", []string{"S05"}, []string{"S05"}},
		{"two named: each once, named first", []string{"S04", "S03"}, []string{"S04", "S03", "S05"}},
		{"a phase task: itself", []string{"S99"}, []string{"S99"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Downstream(dag, tc.ids); !slices.Equal(got, tc.want) {
				t.Errorf("Downstream(%v) = %v, want %v", tc.ids, got, tc.want)
			}
		})
	}
}
