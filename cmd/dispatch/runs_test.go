package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/crashpoint"
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

// TestNewRunKilledMidArchive: a start killed after it archived the ended
// run's files, before it began the new run in the database, loses nothing:
// the next start archives again (nothing left to move) and begins the run.
func TestNewRunKilledMidArchive(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n", "S02-b.md": "echo b > b.txt\n"}})
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("run 1: %s", r)
	}
	writeFile(t, filepath.Join(home, "specs", "p", "S02-b.md"), "echo b2 > b.txt\n")
	r := runDispatch(t, []string{crashpoint.Env + "=" + crashpoint.AfterArchive}, "--home", home, "start", "p")
	if r.code == 0 {
		t.Fatalf("with %s the start should have been killed: %s", crashpoint.AfterArchive, r)
	}
	r = runDispatch(t, nil, "--home", home, "start", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "p run 2 begins (run 1 passed): 1 task(s) to run, 1 reused.") {
		t.Fatalf("start after the crash: %s", r)
	}
	for f, want := range map[string]string{"run-1/S02/output/b.txt": "b\n", "run-1/S01/output/a.txt": "a\n",
		"S02/output/b.txt": "b2\n", "S01/output/a.txt": "a\n"} {
		if got := readFile(t, filepath.Join(home, "runs", "p", f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	if got := readFile(t, filepath.Join(home, "runs", "p", "run-1", "report.md")); !strings.Contains(got, "PASSED") {
		t.Errorf("run 1's report: %q", got)
	}
	r = runDispatch(t, nil, "--home", home, "runs", "p")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 {
		t.Errorf("runs after the crash: %s", r)
	}

	// Killed after archiving a --fresh run (everything moved away), then
	// started without --fresh: every result is reused, and its files are
	// back in place.
	r = runDispatch(t, []string{crashpoint.Env + "=" + crashpoint.AfterArchive}, "--home", home, "start", "p", "--fresh")
	if r.code == 0 {
		t.Fatalf("with %s the start should have been killed: %s", crashpoint.AfterArchive, r)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 || !strings.Contains(r.stdout, "every task's result is reused") {
		t.Fatalf("start after the second crash: %s", r)
	}
	for f, want := range map[string]string{"S02/output/b.txt": "b2\n", "S01/output/a.txt": "a\n", "run-2/S02/output/b.txt": "b2\n"} {
		if got := readFile(t, filepath.Join(home, "runs", "p", f)); got != want {
			t.Errorf("after the second crash, %s = %q, want %q", f, got, want)
		}
	}
}
