package prune

import (
	"fmt"
	"testing"
)

func TestDecideBranches(t *testing.T) {
	const repo, other = "/r/.git", "/other/.git"
	c := func(n int) string { return fmt.Sprintf("%040x", n) }
	// Run 1 made S01 (c1) and S02 (c2), result c10; run 2 S02 again (c3)
	// and S03 (c4), result c11; run 3, current, has S01 only (reused, c1),
	// result c12.
	runs := func() []BranchRun {
		return []BranchRun{
			{N: 1, Repo: repo, Final: c(10), Tasks: map[string][]string{"S01": {c(1)}, "S02": {c(2)}}},
			{N: 2, Repo: repo, Final: c(11), Tasks: map[string][]string{"S02": {c(3)}, "S03": {c(4)}}},
			{N: 3, Repo: repo, Final: c(12), Tasks: map[string][]string{"S01": {c(1)}}},
		}
	}
	refs := map[string]string{
		TaskRef("p", "S01"): c(1), TaskRef("p", "S02"): c(3), TaskRef("p", "S03"): c(4),
		FinalRef("p"): c(12), "refs/heads/dispatch/p/merge": c(11),
	}
	with := func(over map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range refs {
			m[k] = v
		}
		for k, v := range over {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name string
		runs []BranchRun
		gone []int
		refs map[string]string
		want string
	}{
		{"nothing goes", runs(), nil, refs, "[]"},
		{"run 1 goes: S02 is run 2's too, S01 the current run's", runs(), []int{1}, refs, "[]"},
		{"runs 1 and 2: S02 and S03 go, S01 and the current result stay", runs(), []int{1, 2}, refs,
			"[{/r/.git refs/heads/dispatch/p/S02 " + c(3) + "} {/r/.git refs/heads/dispatch/p/S03 " + c(4) + "}]"},
		{"a branch at an older commit of the task still goes", runs(), []int{1, 2}, with(map[string]string{TaskRef("p", "S02"): c(2)}),
			"[{/r/.git refs/heads/dispatch/p/S02 " + c(2) + "} {/r/.git refs/heads/dispatch/p/S03 " + c(4) + "}]"},
		{"a branch the operator moved stays", runs(), []int{1, 2}, with(map[string]string{TaskRef("p", "S02"): c(99), TaskRef("p", "S03"): c(1)}), "[]"},
		{"a branch already gone", runs(), []int{1, 2}, with(map[string]string{TaskRef("p", "S02"): "", TaskRef("p", "S03"): ""}), "[]"},
		{"final at a pruned run's result goes", runs(), []int{1, 2}, with(map[string]string{FinalRef("p"): c(11)}),
			"[{/r/.git refs/heads/dispatch/p/S02 " + c(3) + "} {/r/.git refs/heads/dispatch/p/S03 " + c(4) + "} {/r/.git refs/heads/dispatch/p/final " + c(11) + "}]"},
		{"final at a result a kept run also has stays", []BranchRun{
			{N: 1, Repo: repo, Final: c(10)}, {N: 2, Repo: repo, Final: c(10)}, {N: 3, Repo: repo}},
			[]int{1}, with(map[string]string{FinalRef("p"): c(10)}), "[]"},
		{"final the operator moved stays", runs(), []int{1, 2}, with(map[string]string{FinalRef("p"): c(50)}),
			"[{/r/.git refs/heads/dispatch/p/S02 " + c(3) + "} {/r/.git refs/heads/dispatch/p/S03 " + c(4) + "}]"},
		{"the merge ref stays", runs(), []int{1, 2}, with(map[string]string{"refs/heads/dispatch/p/merge": c(11), FinalRef("p"): ""}),
			"[{/r/.git refs/heads/dispatch/p/S02 " + c(3) + "} {/r/.git refs/heads/dispatch/p/S03 " + c(4) + "}]"},
		{"a run of another repository gives nothing here", []BranchRun{
			{N: 1, Repo: other, Tasks: map[string][]string{"S03": {c(4)}}}, {N: 2, Repo: repo}},
			[]int{1}, refs, "[]"},
		{"a task a kept run of another repository has stays", []BranchRun{
			{N: 1, Repo: repo, Tasks: map[string][]string{"S03": {c(4)}}}, {N: 2, Repo: other, Tasks: map[string][]string{"S03": nil}}},
			[]int{1}, refs, "[]"},
		{"a task with no commit recorded", []BranchRun{
			{N: 1, Repo: repo, Tasks: map[string][]string{"S03": nil}}, {N: 2, Repo: repo}},
			[]int{1}, refs, "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideBranches("p", repo, tc.runs, tc.gone, tc.refs)
			if s := fmt.Sprint(got); s != tc.want && !(tc.want == "[]" && len(got) == 0) {
				t.Errorf("DecideBranches =\n%v\nwant\n%v", s, tc.want)
			}
		})
	}
}

func TestDecideSpares(t *testing.T) {
	runs := []BranchRun{{N: 1, Bases: []string{"b1", "b2"}}, {N: 2, Bases: []string{"b2", "b3"}}, {N: 3, Bases: []string{"b3"}}, {N: 4}}
	tests := []struct {
		name string
		gone []int
		want string
	}{
		{"nothing goes", nil, "[]"},
		{"a base only a pruned run used", []int{1}, "[b1]"},
		{"a base a kept run used stays", []int{2}, "[]"},
		{"two runs go", []int{1, 2}, "[b1 b2]"},
		{"the current run's base stays", []int{1, 2, 4}, "[b1 b2]"},
		{"a run without bases", []int{4}, "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideSpares(runs, tc.gone); fmt.Sprint(got) != tc.want {
				t.Errorf("DecideSpares = %v, want %s", got, tc.want)
			}
		})
	}
}
