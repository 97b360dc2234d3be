package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunsReuseOnSSHNodes: a finished project started again runs, on real
// sshd nodes, only the tasks whose inputs changed (and their dependents),
// says why, and keeps every run for runs, status, report, logs and events.
func TestRunsReuseOnSSHNodes(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	s1, s2 := c.StartServer(t, "n1"), c.StartServer(t, "n2")
	c.Trust(t, s1)
	c.Trust(t, s2)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
  - name: n2
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
`, c.User, s1.Port, s1.WorkDir, c.User, s2.Port, s2.WorkDir))
	unsandboxed(t, h.home, "each task counts its runs in a ledger outside its workspace")
	// Each task counts its runs in a ledger outside every workspace.
	ledger := t.TempDir()
	dir := filepath.Join(h.home, "specs", "app")
	task := func(id, deps, body string) {
		front := ""
		if deps != "" {
			front = "---\ndepends_on: [" + deps + "]\n---\n"
		}
		writeFile(t, filepath.Join(dir, id+"-t.md"), fmt.Sprintf("%secho ran >> %s/%s\necho \"log of $DISPATCH_TASK attempt $DISPATCH_ATTEMPT\"\n%s\n", front, ledger, id, body))
	}
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	task("S01", "", "echo one > one.txt")
	task("S02", "S01", "echo two > two.txt")
	task("S03", "", "echo three > three.txt")
	if r := h.run(t, "start", "app"); r.code != 0 {
		t.Fatalf("run 1: %s", r)
	}

	// S01 changes: S01 and S02 (its dependent) run again; S03 is reused.
	task("S01", "", "echo one again > one.txt")
	r := h.run(t, "start", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "app run 2 begins (run 1 passed): 2 task(s) to run, 1 reused.") ||
		!strings.Contains(r.stdout, "  S01: spec changed\n  S02: depends on S01\n") {
		t.Fatalf("run 2: %s", r)
	}
	runs := func(id string) int {
		b, _ := os.ReadFile(filepath.Join(ledger, id))
		return strings.Count(string(b), "ran")
	}
	if got := fmt.Sprint(runs("S01"), runs("S02"), runs("S03")); got != "2 2 1" {
		t.Errorf("times S01 S02 S03 ran on the nodes: %s, want 2 2 1", got)
	}

	// Nothing changed: run 3 runs nothing on the nodes and passes at once.
	r = h.run(t, "start", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "app run 3: nothing changed since run 2 (passed)") {
		t.Fatalf("run 3: %s", r)
	}
	// --fresh runs everything.
	if r := h.run(t, "start", "app", "--fresh"); r.code != 0 || !strings.Contains(r.stdout, "  S03: --fresh\n") {
		t.Fatalf("run 4 (--fresh): %s", r)
	}
	if got := fmt.Sprint(runs("S01"), runs("S02"), runs("S03")); got != "3 3 2" {
		t.Errorf("after --fresh, times S01 S02 S03 ran: %s, want 3 3 2", got)
	}

	var list struct {
		Project string `json:"project"`
		Runs    []struct {
			Run         int    `json:"run"`
			Result      string `json:"result"`
			StartedAt   string `json:"started_at"`
			FinishedAt  string `json:"finished_at"`
			TasksRan    int    `json:"tasks_ran"`
			TasksReused int    `json:"tasks_reused"`
		} `json:"runs"`
	}
	r = h.run(t, "runs", "app", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("runs --json: %v\n%s", err, r)
	}
	var got []string
	for _, x := range list.Runs {
		if x.StartedAt == "" || x.FinishedAt == "" {
			t.Errorf("run %d has no times: %+v", x.Run, x)
		}
		got = append(got, fmt.Sprintf("%d %s %d/%d", x.Run, x.Result, x.TasksRan, x.TasksReused))
	}
	if want := "1 passed 3/0|2 passed 2/1|3 passed 0/3|4 passed 3/0"; strings.Join(got, "|") != want {
		t.Errorf("runs = %s, want %s", strings.Join(got, "|"), want)
	}

	var rep struct {
		Run   int `json:"run"`
		Tasks []struct {
			ID            string `json:"id"`
			ReusedFromRun int    `json:"reused_from_run"`
			Attempt       int    `json:"attempt"`
			Attempts      []struct {
				Attempt int `json:"attempt"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	r = h.run(t, "report", "app", "--format", "json", "--run", "2")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report --run 2: %v\n%s", err, r)
	}
	got = nil
	for _, tk := range rep.Tasks {
		got = append(got, fmt.Sprintf("%s:%d:#%d:%d", tk.ID, tk.ReusedFromRun, tk.Attempt, len(tk.Attempts)))
	}
	if want := "S01:0:#2:1 S02:0:#2:1 S03:1:#1:0"; rep.Run != 2 || strings.Join(got, " ") != want {
		t.Errorf("report of run 2: run %d, %s; want %s", rep.Run, strings.Join(got, " "), want)
	}
	if r := h.run(t, "report", "app", "--run", "3"); !strings.Contains(r.stdout, "S01 (run 2), S02 (run 2), S03 (run 1)") {
		t.Errorf("report.md of run 3 does not say what it reused: %s", r)
	}
	// Each run's outputs and report are kept.
	if b := readFile(t, filepath.Join(h.home, "runs", "app", "run-1", "S01", "output", "one.txt")); b != "one\n" {
		t.Errorf("run 1's one.txt = %q", b)
	}
	if b := readFile(t, filepath.Join(h.home, "runs", "app", "S01", "output", "one.txt")); b != "one again\n" {
		t.Errorf("the latest one.txt = %q", b)
	}
	for _, f := range []string{"run-1/report.md", "run-2/report.md", "run-3/report.md", "report.md"} {
		if _, err := os.Stat(filepath.Join(h.home, "runs", "app", f)); err != nil {
			t.Error(err)
		}
	}
	if r := h.run(t, "status", "app", "--run", "1"); r.code != 0 || !strings.Contains(r.stdout, "passed") {
		t.Errorf("status --run 1: %s", r)
	}
	if r := h.run(t, "status", "app", "--run", "3"); r.code != 0 || !strings.Contains(r.stdout, "reused from run 1") {
		t.Errorf("status --run 3: %s", r)
	}
	if r := h.run(t, "logs", "app", "S01", "--run", "1"); r.code != 0 || !strings.Contains(r.stdout, "log of S01 attempt 1") {
		t.Errorf("logs --run 1: %s", r)
	}
	if r := h.run(t, "logs", "app", "S01"); r.code != 0 || !strings.Contains(r.stdout, "log of S01 attempt 3") {
		t.Errorf("logs of the latest run: %s", r)
	}
	r = h.run(t, "events", "app", "--run", "2", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"kind":"reused"`) || strings.Contains(r.stdout, "--fresh") {
		t.Errorf("events --run 2: %s", r)
	}
	for _, bad := range [][]string{{"status", "app", "--run", "9"}, {"report", "app", "--run", "0"}, {"events", "app", "--run", "5"}} {
		if r := h.run(t, bad...); r.code != 2 || !strings.Contains(r.stderr, "runs 1 to 4") && !strings.Contains(r.stderr, "1 or more") {
			t.Errorf("%v: %s", bad, r)
		}
	}
}
