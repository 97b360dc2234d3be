package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// TestStopLetsRunningTasksFinish: `stop` without --kill starts nothing new,
// but the task that runs goes on, completes and is collected; status and
// report say the project is stopped; stopping again, or stopping a
// finished project, exits 0 and says so.
func TestStopLetsRunningTasksFinish(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {
			"S01-long.md":  fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho done > out.txt\n", gate),
			"S02-later.md": "---\ndepends_on: [S01]\n---\necho later\n",
		},
		"q": {"S01-x.md": "echo q\n"},
	})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	if r := runDispatch(t, nil, "--home", home, "start", "q"); r.code != 0 {
		t.Fatalf("start q: %s", r)
	}
	wait := startBackground(t, nil, "--home", home, "start", "p")
	pollUntil(t, 30*time.Second, "p/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "p", "S01").Status == domain.Running
	})
	r := runDispatch(t, nil, "--home", home, "stop", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "p stopped") || !strings.Contains(r.stdout, "go on") {
		t.Fatalf("stop: %s", r)
	}
	r = runDispatch(t, nil, "--home", home, "stop", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "already stopped") {
		t.Fatalf("stop of a stopped project: %s", r)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r = wait()
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "stopped") {
		t.Fatalf("start p after stop: %s", r)
	}
	if tk := taskState(t, home, "p", "S01"); tk.Status != domain.Completed {
		t.Fatalf("S01 after stop: %s (%s); want completed", tk.Status, tk.Error)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "out.txt"))); got != "done" {
		t.Fatalf("S01's output was not collected: %q", got)
	}
	if tk := taskState(t, home, "p", "S02"); tk.Attempt != 0 {
		t.Fatalf("S02 started after stop: attempt %d", tk.Attempt)
	}
	if r := runDispatch(t, nil, "--home", home, "status", "p"); !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("status: %s", r)
	}
	r = runDispatch(t, nil, "--home", home, "report", "p", "--format", "json")
	var rep struct{ Result string }
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Result != domain.ResultStopped {
		t.Fatalf("report --format json: result %q (%v): %s", rep.Result, err, r)
	}
	if r := runDispatch(t, nil, "--home", home, "report", "p"); !strings.Contains(r.stdout, "**STOPPED**") {
		t.Fatalf("report: %s", r)
	}
	// Stopping a finished project is not an error either.
	r = runDispatch(t, nil, "--home", home, "stop", "q")
	if r.code != 0 || !strings.Contains(r.stdout, "already finished") {
		t.Fatalf("stop of a finished project: %s", r)
	}
	// start resumes: S02 runs.
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("resume: %s", r)
	}
	if tk := taskState(t, home, "p", "S02"); tk.Status != domain.Completed {
		t.Fatalf("S02 after resume: %s", tk.Status)
	}
}

// TestNewSpecInAFinishedProject: a spec added to a finished project runs on
// the next start, then the integration phase runs again over every
// output, and start returns with the result (it used to wait for ever).
func TestNewSpecInAFinishedProject(t *testing.T) {
	home, _ := opsHome(t, nil)
	dir := filepath.Join(home, "specs", "p")
	// No fix round: F01 would be generated for the node's agent CLI.
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nmax_fix_rounds: 0\n")
	writeFile(t, filepath.Join(dir, "S01-a.md"), "echo a > a.txt\n")
	writeFile(t, filepath.Join(dir, "S99-integrate.md"), "ls > INTEGRATION.md\n")
	writeFile(t, filepath.Join(dir, "V01-verify.md"), "echo '{\"pass\": true, \"issues\": []}' > verdict.json\n")
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("first start: %s", r)
	}
	writeFile(t, filepath.Join(dir, "S02-b.md"), "echo b > b.txt\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, stdout, stderr := dispatchCmd(ctx, nil, "--home", home, "start", "p")
	r := wait(t, ctx, cmd, stdout, stderr)
	if r.code != 0 {
		t.Fatalf("start after adding S02: %s", r)
	}
	if tk := taskState(t, home, "p", "S02"); tk.Status != domain.Completed {
		t.Fatalf("S02: %s", tk.Status)
	}
	integ := readFile(t, filepath.Join(home, "runs", "p", "final", "INTEGRATION.md"))
	if !strings.Contains(integ, "a.txt") || !strings.Contains(integ, "b.txt") {
		t.Fatalf("the integration did not run again over both outputs; INTEGRATION.md:\n%s", integ)
	}
	if r := runDispatch(t, nil, "--home", home, "report", "p"); !strings.Contains(r.stdout, "**PASSED**") || !strings.Contains(r.stdout, "S02") {
		t.Fatalf("report: %s", r)
	}
}

// TestStopKillSaysRetry: `stop --kill` cancels the running tasks, which
// `dispatch start` does not run again: the stop's answer, the start that
// followed the project and status name `dispatch retry` with the canceled
// IDs, and never say that start resumes them; the progress counts them as
// canceled, not done.
func TestStopKillSaysRetry(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "never")
	wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-a.md": wait, "S02-b.md": wait},
	})
	follow := startBackground(t, nil, "--home", home, "start", "p")
	pollUntil(t, 30*time.Second, "p/S01 and p/S02 to run", func() bool {
		return control.Running(home) && taskState(t, home, "p", "S01").Status == domain.Running &&
			taskState(t, home, "p", "S02").Status == domain.Running
	})
	r := runDispatch(t, nil, "--home", home, "stop", "p", "--kill")
	if r.code != 0 || !strings.Contains(r.stdout, "dispatch retry p S01 S02") || strings.Contains(r.stdout, "start p resumes") {
		t.Fatalf("stop --kill: want the retry command, not start: %s", r)
	}
	r = follow()
	if r.code != 1 || !strings.Contains(r.stderr, "dispatch retry p S01 S02") || strings.Contains(r.stdout+r.stderr, "start p resumes") {
		t.Fatalf("start following p: want the retry command, not start: %s", r)
	}
	if !strings.Contains(r.stdout, "0/2 done") || !strings.Contains(r.stdout, "2 canceled") {
		t.Fatalf("start following p: the progress counts canceled tasks as done: %s", r)
	}
	r = runDispatch(t, nil, "--home", home, "status", "p")
	if !strings.Contains(r.stdout, "dispatch retry p S01 S02") || strings.Contains(r.stdout, "start p resumes") {
		t.Fatalf("status: want the retry command, not start: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "report", "p"); !strings.Contains(r.stdout, "dispatch retry p S01 S02") {
		t.Fatalf("report: want the retry command: %s", r)
	}
}
