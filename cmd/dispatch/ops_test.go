package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// unsandboxed sets sandbox: off, with why as its comment, on every node
// of home's nodes.yaml: for a test of dispatch, not of the sandbox, whose
// tasks or tools need a side channel outside their workspace (a file the
// test writes or reads, a fake CLI under /tmp), which the default sandbox
// (auto: bwrap where it works) takes away.
func unsandboxed(t *testing.T, home, why string) {
	t.Helper()
	cfg := filepath.Join(home, "nodes.yaml")
	var b strings.Builder
	for _, line := range strings.SplitAfter(readFile(t, cfg), "\n") {
		b.WriteString(line)
		if rest, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "- name: "); ok && rest != "" {
			indent := strings.Repeat(" ", len(line)-len(strings.TrimLeft(line, " "))+2)
			fmt.Fprintf(&b, "%ssandbox: off # %s\n", indent, why)
		}
	}
	writeFile(t, cfg, b.String())
}

// opsHome is a local-node home with the given projects of shell tasks.
func opsHome(t *testing.T, projects map[string]map[string]string) (home, work string) {
	t.Helper()
	home = t.TempDir()
	work = filepath.Join(t.TempDir(), "work")
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: local
    slots: 4
    work_dir: %s
`, work))
	for p, files := range projects {
		writeFile(t, filepath.Join(home, "specs", p, "project.yaml"), "tool: shell\nintegration: false\n")
		for name, body := range files {
			writeFile(t, filepath.Join(home, "specs", p, name), body)
		}
	}
	return home, work
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new-home")
	r := runDispatch(t, nil, "init", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "dispatch validate example") {
		t.Fatalf("init: %s", r)
	}
	if r := runDispatch(t, nil, "init", dir); r.code != 2 || !strings.Contains(r.stderr, "already has") {
		t.Fatalf("init over an existing home: %s", r)
	}
	// The scaffold runs as it is (with the work_dir moved into the test).
	cfg := readFile(t, filepath.Join(dir, "nodes.yaml"))
	writeFile(t, filepath.Join(dir, "nodes.yaml"), strings.Replace(cfg, "~/.dispatch/work", filepath.Join(t.TempDir(), "w"), 1))
	if r := runDispatch(t, nil, "--home", dir, "start", "example"); r.code != 0 {
		t.Fatalf("start example: %s", r)
	}
}

func TestOperatorCommandsWithARunningController(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{
		"a": {"S01-long.md": "echo started; sleep 60\n", "S02-quick.md": "echo quick\n"},
		"b": {"S01-x.md": "echo b > b.txt\n"},
	})
	wait := startBackground(t, nil, "--home", home, "start", "a")
	pollUntil(t, 30*time.Second, "a/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "a", "S01").Status == domain.Running
	})

	// start b is handed to the running controller, followed to its end.
	r := runDispatch(t, nil, "--home", home, "start", "b")
	if r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") {
		t.Fatalf("start b while a controller runs: %s", r)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(home, "runs", "b", "S01", "output", "b.txt"))); got != "b" {
		t.Fatalf("b's output: %q", got)
	}
	// Refusals.
	if r := runDispatch(t, nil, "--home", home, "retry", "a", "S09"); r.code != 2 || !strings.Contains(r.stderr, `no task "S09"`) {
		t.Fatalf("retry of an unknown task: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "retry", "a", "S01"); r.code != 2 || !strings.Contains(r.stderr, "cancel it first") {
		t.Fatalf("retry of a running task: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "cleanup", "a", "--yes"); r.code != 2 || !strings.Contains(r.stderr, "running tasks") {
		t.Fatalf("cleanup while running: %s", r)
	}
	// logs of the running task come from its node.
	if r := runDispatch(t, nil, "--home", home, "logs", "a", "S01"); r.code != 0 || r.stdout != "started\n" {
		t.Fatalf("logs: %s", r)
	}
	// cancel kills it on the node.
	r = runDispatch(t, nil, "--home", home, "cancel", "a", "S01")
	if r.code != 0 || !strings.Contains(r.stdout, "killed 1 running attempt") {
		t.Fatalf("cancel: %s", r)
	}
	if _, _, _, status := nodeStatusJSON(t, work, "a", "S01"); status != "killed" {
		t.Fatalf("status.json on the node after cancel: %q", status)
	}
	r = wait()
	if r.code != 1 {
		t.Fatalf("a with a canceled task should end failed: %s", r)
	}
	// events: the whole history, as text and JSON lines.
	r = runDispatch(t, nil, "--home", home, "events", "a", "--json")
	if r.code != 0 {
		t.Fatalf("events: %s", r)
	}
	var kinds []string
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var ev struct{ Kind, Task, To string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events --json line %q: %v", sc.Text(), err)
		}
		kinds = append(kinds, ev.Kind+":"+ev.Task+":"+ev.To)
	}
	joined := strings.Join(kinds, " ")
	for _, want := range []string{"cancel:S01:canceled", "status:S02:completed", "project::done"} {
		if !strings.Contains(joined, want) {
			t.Errorf("events lack %s: %s", want, joined)
		}
	}
	if r := runDispatch(t, nil, "--home", home, "events", "a"); r.code != 0 || !strings.Contains(r.stdout, "canceled by the operator") {
		t.Fatalf("events text: %s", r)
	}
	// retry without a controller: this command takes the lock itself.
	writeFile(t, filepath.Join(home, "specs", "a", "S01-long.md"), "echo now quick > q.txt\n")
	r = runDispatch(t, nil, "--home", home, "retry", "a", "S01")
	if r.code != 0 || !strings.Contains(r.stdout, "takes its changed spec") || !strings.Contains(r.stdout, "no controller is running") {
		t.Fatalf("retry: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "a"); r.code != 0 {
		t.Fatalf("start after retry: %s", r)
	}
	if tk := taskState(t, home, "a", "S01"); tk.Status != domain.Completed || tk.Attempt != 2 {
		t.Fatalf("a/S01 after retry: %s attempt %d", tk.Status, tk.Attempt)
	}
	// cleanup: says what it removes, then removes it.
	r = runDispatch(t, nil, "--home", home, "cleanup", "a")
	if r.code != 2 || !strings.Contains(r.stdout, "would remove local:") {
		t.Fatalf("cleanup without --yes: %s", r)
	}
	if _, err := os.Stat(filepath.Join(work, "a")); err != nil {
		t.Fatalf("cleanup without --yes removed the workspace: %v", err)
	}
	if r := runDispatch(t, nil, "--home", home, "cleanup", "a", "--yes"); r.code != 0 {
		t.Fatalf("cleanup --yes: %s", r)
	}
	if _, err := os.Stat(filepath.Join(work, "a")); !os.IsNotExist(err) {
		t.Fatalf("workspace still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "runs", "a", "S02", "output")); err != nil {
		t.Fatalf("cleanup touched the collected outputs: %v", err)
	}
}

func TestDetachStopAndResume(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-long.md": "sleep 60\n", "S02-later.md": "---\ndepends_on: [S01]\n---\necho later\n"},
	})
	r := runDispatch(t, nil, "--home", home, "start", "p", "--detach")
	if r.code != 0 || !strings.Contains(r.stdout, "in the background") {
		t.Fatalf("start --detach: %s", r)
	}
	pollUntil(t, 30*time.Second, "the detached controller to run S01", func() bool {
		return taskState(t, home, "p", "S01").Status == domain.Running
	})
	if _, err := os.Stat(filepath.Join(home, "dispatch.pid")); err != nil {
		t.Fatalf("no pid file: %v", err)
	}
	r = runDispatch(t, nil, "--home", home, "stop", "p", "--kill")
	if r.code != 0 || !strings.Contains(r.stdout, "stopped") || !strings.Contains(r.stdout, "killed 1") {
		t.Fatalf("stop --kill: %s", r)
	}
	// With nothing left to serve, the background controller ends.
	pollUntil(t, 30*time.Second, "the background controller to exit", func() bool {
		_, err := os.Stat(filepath.Join(home, "dispatch.pid"))
		return os.IsNotExist(err) && !control.Running(home)
	})
	if tk := taskState(t, home, "p", "S02"); tk.Attempt != 0 {
		t.Fatalf("S02 started after stop: attempt %d", tk.Attempt)
	}
	if !strings.Contains(readFile(t, filepath.Join(home, "dispatch.log")), "dispatch") {
		t.Fatal("dispatch.log is empty")
	}
	// Resume: retry the canceled task and start again.
	writeFile(t, filepath.Join(home, "specs", "p", "S01-long.md"), "echo quick\n")
	if r := runDispatch(t, nil, "--home", home, "retry", "p", "S01"); r.code != 0 {
		t.Fatalf("retry: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("resume: %s", r)
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runDispatch(t, nil, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "dispatch") || len(r.stdout) < 200 {
			t.Errorf("completion %s: %s", sh, r)
		}
	}
	r := runDispatch(t, nil, "--generate-bash-completion")
	for _, cmd := range []string{"start", "status", "retry", "logs", "events", "cleanup", "nodes"} {
		if !strings.Contains(r.stdout, cmd) {
			t.Errorf("completion candidates lack %s: %q", cmd, r.stdout)
		}
	}
	if r := runDispatch(t, nil, "completion", "tcsh"); r.code != 2 {
		t.Errorf("completion tcsh: %s", r)
	}
}

func TestLogsFollow(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-talk.md": "for i in 1 2 3 4; do echo line $i; sleep 0.5; done\n"},
	})
	wait := startBackground(t, nil, "--home", home, "start", "p")
	pollUntil(t, 30*time.Second, "S01 to run", func() bool {
		return taskState(t, home, "p", "S01").Status == domain.Running
	})
	r := runDispatch(t, nil, "--home", home, "logs", "p", "S01", "-f")
	if r.code != 0 || r.stdout != "line 1\nline 2\nline 3\nline 4\n" {
		t.Fatalf("logs -f: %s", r)
	}
	if r := wait(); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	// Once collected, the log comes from runs/.
	if r := runDispatch(t, nil, "--home", home, "logs", "p", "S01", "--attempt", "1"); r.stdout != "line 1\nline 2\nline 3\nline 4\n" {
		t.Fatalf("logs of a collected attempt: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "logs", "p", "S01", "--attempt", "2"); r.code != 2 {
		t.Fatalf("logs of an attempt that never ran: %s", r)
	}
}

// TestCleanupKeepsALiveAttempt: the database may have given an attempt up
// while its wrapper still runs on the node; cleanup removes everything else
// of the project there, but never that attempt's directory.
func TestCleanupKeepsALiveAttempt(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{
		"a": {"S01-x.md": "echo one\n", "S02-y.md": "echo two\n"},
	})
	if r := runDispatch(t, nil, "--home", home, "start", "a"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	bins, _ := filepath.Glob(filepath.Join(work, ".bin", "dispatch-wrapper-*"))
	if len(bins) != 1 {
		t.Fatalf("installed wrappers: %v", bins)
	}
	// A leftover attempt of S01 still runs on the node.
	dir := filepath.Join(work, "a", "tasks", "S01")
	writeFile(t, filepath.Join(dir, "launch.json"), `{"project":"a","task":"S01","attempt":9,"command":["/bin/sh","-c","sleep 60"]}`)
	run := exec.Command(bins[0], "run", "--dir", dir)
	run.Stdin = strings.NewReader("{}")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(bins[0], "kill", "--dir", dir, "--grace", "0").Run() })

	r := runDispatch(t, nil, "--home", home, "cleanup", "a", "--yes")
	if r.code == 0 || !strings.Contains(r.stdout, "kept "+dir) {
		t.Fatalf("cleanup with a live attempt: %s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "lock")); err != nil {
		t.Fatalf("cleanup removed the live attempt's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "a", "tasks", "S02")); !os.IsNotExist(err) {
		t.Fatalf("cleanup kept S02, whose attempt is over: %v", err)
	}
	out, err := exec.Command(bins[0], "kill", "--dir", dir, "--grace", "0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"killed"`) {
		t.Fatalf("kill: %v: %s", err, out)
	}
	if r := runDispatch(t, nil, "--home", home, "cleanup", "a", "--yes"); r.code != 0 {
		t.Fatalf("cleanup once the attempt is dead: %s", r)
	}
	if _, err := os.Stat(filepath.Join(work, "a")); !os.IsNotExist(err) {
		t.Fatalf("workspace still there: %v", err)
	}
}

// TestHandedNewRunSaysOneThing: a start of a finished project handed to a
// running controller begins a new run; its answer says what that run does
// (run 2, the tasks to run) and not also "0 new task(s)".
func TestHandedNewRunSaysOneThing(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"a": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)},
		"b": {"S01-x.md": "echo b1\n", "S02-y.md": "echo b2\n"},
	})
	unsandboxed(t, home, "a/S01 waits for a file the test writes outside its workspace")
	if r := runDispatch(t, nil, "--home", home, "start", "b"); r.code != 0 {
		t.Fatalf("start b: %s", r)
	}
	writeFile(t, filepath.Join(home, "specs", "b", "S01-x.md"), "echo b1 changed\n")
	writeFile(t, filepath.Join(home, "specs", "b", "S02-y.md"), "echo b2 changed\n")
	wait := startBackground(t, nil, "--home", home, "start", "a")
	pollUntil(t, 30*time.Second, "a/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "a", "S01").Status == domain.Running
	})
	r := runDispatch(t, nil, "--home", home, "start", "b")
	if r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") ||
		!strings.Contains(r.stdout, "run 2 begins") || !strings.Contains(r.stdout, "2 task(s) to run") {
		t.Fatalf("start b handed over: %s", r)
	}
	if strings.Contains(r.stdout, "new task(s)") {
		t.Fatalf("start b handed over says both how many tasks are new and how many run: %s", r)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(); r.code != 0 {
		t.Fatalf("start a: %s", r)
	}
}
