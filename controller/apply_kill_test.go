package controller

import (
	"reflect"
	"testing"
)

func TestDecideKills(t *testing.T) {
	a := staleAttempt{node: "n1", project: "p", task: "S01", dir: "/w/p/tasks/S01", attempt: 1}
	b := staleAttempt{node: "n2", project: "p", task: "S02", dir: "/w/p/tasks/S02", attempt: 2}
	tests := []struct {
		name      string
		prev      map[string]int
		stale     []staleAttempt
		tried     map[staleAttempt]bool
		failed    map[staleAttempt]string
		failures  map[string]int
		holdNodes map[string]bool
		givenUp   []staleAttempt
	}{
		{name: "killed: nothing held", stale: []staleAttempt{a}, tried: map[staleAttempt]bool{a: true},
			failures: map[string]int{}, holdNodes: map[string]bool{}},
		{name: "first failure holds node and task", stale: []staleAttempt{a},
			tried: map[staleAttempt]bool{a: true}, failed: map[staleAttempt]string{a: "refused"},
			failures: map[string]int{killKey(a): 1}, holdNodes: map[string]bool{"n1": true}},
		{name: "not tried (node busy) holds without counting", prev: map[string]int{killKey(a): 2}, stale: []staleAttempt{a},
			failures: map[string]int{killKey(a): 2}, holdNodes: map[string]bool{"n1": true}},
		{name: "third failure gives up", prev: map[string]int{killKey(a): 2}, stale: []staleAttempt{a, b},
			tried: map[staleAttempt]bool{a: true, b: true}, failed: map[staleAttempt]string{a: "refused", b: "timeout"},
			failures: map[string]int{killKey(a): 3, killKey(b): 1}, holdNodes: map[string]bool{"n2": true}, givenUp: []staleAttempt{a}},
		{name: "after giving up nothing is held", prev: map[string]int{killKey(a): 3}, stale: []staleAttempt{a},
			tried: map[staleAttempt]bool{a: true}, failed: map[staleAttempt]string{a: "refused"},
			failures: map[string]int{killKey(a): 4}, holdNodes: map[string]bool{}},
		{name: "gone stale attempts are forgotten", prev: map[string]int{killKey(a): 2},
			failures: map[string]int{}, holdNodes: map[string]bool{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideKills(tc.prev, tc.stale, tc.tried, tc.failed)
			if !reflect.DeepEqual(d.failures, tc.failures) {
				t.Errorf("failures = %v, want %v", d.failures, tc.failures)
			}
			if !reflect.DeepEqual(d.holdNodes, tc.holdNodes) {
				t.Errorf("held nodes = %v, want %v", d.holdNodes, tc.holdNodes)
			}
			if len(d.holdTasks) != len(d.holdNodes) {
				t.Errorf("held tasks = %v, want one per held node", d.holdTasks)
			}
			if !reflect.DeepEqual(d.givenUp, tc.givenUp) {
				t.Errorf("given up = %v, want %v", d.givenUp, tc.givenUp)
			}
		})
	}
}
