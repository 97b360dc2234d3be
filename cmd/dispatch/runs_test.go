package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRuns: `dispatch runs` lists the project's run with its result,
// times, tasks and cost, in text and in the JSON the issue fixes.
func TestRuns(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "true\n", "S02-b.md": "true\n"}})
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	r := runDispatch(t, nil, "--home", home, "runs", "p", "--json")
	var v struct {
		Project string `json:"project"`
		Runs    []struct {
			Run         int     `json:"run"`
			Result      string  `json:"result"`
			StartedAt   string  `json:"started_at"`
			FinishedAt  string  `json:"finished_at"`
			TasksRan    int     `json:"tasks_ran"`
			TasksReused int     `json:"tasks_reused"`
			CostUSD     float64 `json:"cost_usd"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("runs --json: %v\n%s", err, r)
	}
	if v.Project != "p" || len(v.Runs) != 1 || v.Runs[0].Run != 1 || v.Runs[0].Result != "passed" || v.Runs[0].TasksRan != 2 ||
		v.Runs[0].StartedAt == "" || v.Runs[0].FinishedAt == "" {
		t.Errorf("runs: %+v", v)
	}
	if r := runDispatch(t, nil, "--home", home, "runs", "p"); r.code != 0 || !strings.Contains(r.stdout, "RUN") || !strings.Contains(r.stdout, "passed") {
		t.Errorf("runs: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "runs", "nope"); r.code != 2 || !strings.Contains(r.stderr, "p") {
		t.Errorf("runs of an unknown project: %s", r)
	}
}
