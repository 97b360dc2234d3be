package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// outputLine is where a `dispatch run` says its output is.
var outputLine = regexp.MustCompile(`(?m)^output: (.+)$`)

// runProjectLine names the spec directory a `dispatch run` wrote.
var runProjectLine = regexp.MustCompile(`one-off run of S01 in (\S+)`)

func oneOffOutput(t *testing.T, r result) (project, output string) {
	t.Helper()
	m := runProjectLine.FindStringSubmatch(r.stdout)
	o := outputLine.FindStringSubmatch(r.stdout)
	if m == nil || o == nil {
		t.Fatalf("run does not say its project and output:\n%s", r)
	}
	return filepath.Base(m[1]), o[1]
}

// runDispatchStdin runs dispatch to the end with stdin as its input.
func runDispatchStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, stdout, stderr := dispatchCmd(ctx, nil, args...)
	cmd.Stdin = strings.NewReader(stdin)
	return wait(t, ctx, cmd, stdout, stderr)
}

func TestOneOffShell(t *testing.T) {
	home, _ := opsHome(t, nil)
	r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "echo hi > out.txt")
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	project, out := oneOffOutput(t, r)
	if !strings.HasPrefix(project, "run-") || out != filepath.Join(home, "runs", project, "S01", "output") {
		t.Fatalf("run made project %q with output %q:\n%s", project, out, r)
	}
	if got := readFile(t, filepath.Join(out, "out.txt")); got != "hi\n" {
		t.Errorf("out.txt = %q", got)
	}
	if !strings.Contains(r.stdout, "dispatch logs "+project+" S01") {
		t.Errorf("run does not name its log command:\n%s", r)
	}
	// The spec is kept; its title is the text's first line.
	specs, _ := filepath.Glob(filepath.Join(home, "specs", project, "S01-*.md"))
	if len(specs) != 1 || !strings.HasSuffix(readFile(t, specs[0]), "---\necho hi > out.txt\n") {
		t.Fatalf("the spec of %s: %v", project, specs)
	}
	s, _ := getStatus(t, home, project)
	if tk := s.task(t, "S01"); tk.Title != "echo hi out txt" || tk.Status != "completed" {
		t.Errorf("S01 = %+v", tk)
	}
	if len(s.Tasks) != 1 {
		t.Errorf("a one-off run has one task, no integration phase: %+v", s.Tasks)
	}

	// A failing script: exit 1 with the end of its log.
	r = runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "echo boom-marker; exit 3")
	if r.code != 1 || !strings.Contains(r.stderr, "boom-marker") || !strings.Contains(r.stderr, "task.log") {
		t.Fatalf("a failing run: %s", r)
	}
	if p, _ := oneOffOutput(t, r); p == project {
		t.Errorf("a second run without --project reused %s", p)
	}
}

func TestOneOffFileAndStdin(t *testing.T) {
	home, _ := opsHome(t, nil)
	file := filepath.Join(t.TempDir(), "script.sh")
	// Text that a shell on the controller would expand.
	writeFile(t, file, "echo '$HOME; `id`' > from-file.txt\n")
	r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "-f", file)
	if r.code != 0 {
		t.Fatalf("run -f: %s", r)
	}
	_, out := oneOffOutput(t, r)
	if got := readFile(t, filepath.Join(out, "from-file.txt")); got != "$HOME; `id`\n" {
		t.Errorf("from-file.txt = %q", got)
	}
	// A leading "---" stays text, not front matter.
	r = runDispatchStdin(t, "---\necho stdin > from-stdin.txt\n", "--home", home, "run", "--tool", "shell")
	if r.code != 0 {
		t.Fatalf("run with the text on stdin: %s", r)
	}
	_, out = oneOffOutput(t, r)
	if got := readFile(t, filepath.Join(out, "from-stdin.txt")); got != "stdin\n" {
		t.Errorf("from-stdin.txt = %q", got)
	}
}

func TestOneOffAgent(t *testing.T) {
	home, work := opsHome(t, nil)
	unsandboxed(t, home, "the fake agent CLI lives under /tmp, which the sandbox replaces")
	bin := fakeAgents(t)
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
	const prompt = "Write the notes.\nFILE notes.txt from the agent\n"
	r := runDispatch(t, env, "--home", home, "run", "--tool", "claude", "--node", "local", "--project", "ask", prompt)
	if r.code != 0 {
		t.Fatalf("run --tool claude: %s", r)
	}
	if got := readFile(t, filepath.Join(work, "ask", "tasks", "S01", "seen-prompt.txt")); got != prompt {
		t.Errorf("the agent saw the prompt %q, want %q", got, prompt)
	}
	if got := readFile(t, filepath.Join(home, "runs", "ask", "S01", "output", "notes.txt")); got != "from the agent\n" {
		t.Errorf("notes.txt = %q", got)
	}
	s, _ := getStatus(t, home, "ask")
	if tk := s.task(t, "S01"); tk.Node != "local" || tk.Title != "Write the notes" {
		t.Errorf("S01 = %+v", tk)
	}
}

func TestOneOffProjectRuns(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"mine": {"S01-a.md": "echo mine\n"}})
	for _, text := range []string{"echo one > n.txt", "echo two > n.txt"} {
		if r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "--project", "p", text); r.code != 0 {
			t.Fatalf("run --project p %q: %s", text, r)
		}
	}
	if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "n.txt")); got != "two\n" {
		t.Errorf("the second run's n.txt = %q", got)
	}
	specs, _ := filepath.Glob(filepath.Join(home, "specs", "p", "*.md"))
	if len(specs) != 1 || !strings.Contains(readFile(t, specs[0]), "echo two") {
		t.Errorf("specs/p after two runs: %v", specs)
	}
	r := runDispatch(t, nil, "--home", home, "runs", "p", "--json")
	var v struct{ Runs []struct{ Run int } }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || len(v.Runs) != 2 {
		t.Fatalf("runs p after two runs: %s", r)
	}
	// The same text again is a new run of the task, not a reused result.
	if r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "--project", "p", "echo two > n.txt"); r.code != 0 {
		t.Fatalf("run --project p again: %s", r)
	}
	r = runDispatch(t, nil, "--home", home, "runs", "p", "--json")
	v.Runs = nil
	if json.Unmarshal([]byte(r.stdout), &v) != nil || len(v.Runs) != 3 {
		t.Fatalf("runs p after three runs: %s", r)
	}
	// A project dispatch run did not write is left alone.
	before := tree(t, filepath.Join(home, "specs", "mine"))
	if r := runDispatch(t, nil, "--home", home, "run", "--project", "mine", "echo x"); r.code != 2 || !strings.Contains(r.stderr, "run leaves it alone") {
		t.Errorf("run --project of an existing project: %s", r)
	}
	assertTreeUnchanged(t, filepath.Join(home, "specs", "mine"), before)
}

func TestOneOffBadInput(t *testing.T) {
	home, _ := opsHome(t, nil)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown node", []string{"--tool", "shell", "--node", "nope", "echo x"}, `no node "nope"`},
		{"unknown tool", []string{"--tool", "nope", "echo x"}, `no tool "nope"`},
		{"empty text", []string{"--tool", "shell", "  \n"}, "empty"},
		{"no text (stdin empty)", []string{"--tool", "shell"}, "empty"},
		{"bad project", []string{"--project", "_run", "echo x"}, "invalid name"},
		{"project with a slash", []string{"--project", "../x", "echo x"}, "invalid name"},
		{"two arguments", []string{"echo", "x"}, "one argument"},
		{"argument and file", []string{"-f", "x.sh", "echo x"}, "not both"},
		{"missing file", []string{"-f", filepath.Join(home, "none.sh")}, "none.sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runDispatch(t, nil, append([]string{"--home", home, "run"}, tc.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("want exit 2 saying %q: %s", tc.want, r)
			}
		})
	}
	// A tool no node has: refused by the plan, before anything runs.
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, readFile(t, cfg)+"tools:\n  absent: { command: [no-such-agent-cli, \"{spec}\"] }\n")
	if r := runDispatch(t, nil, "--home", home, "run", "--tool", "absent", "do it"); r.code != 2 || !strings.Contains(r.stderr, "no-such-agent-cli") {
		t.Errorf("run with a tool no node has: %s", r)
	}
	if entries, _ := os.ReadDir(filepath.Join(home, "specs")); len(entries) > 0 {
		t.Errorf("bad input left projects under specs/: %v", entries)
	}
}

// TestOneOffHandOff runs a one-off while another one-off holds the home:
// the second is handed to the running controller and followed to its
// end; a run of the busy project itself is refused.
func TestOneOffHandOff(t *testing.T) {
	home, _ := opsHome(t, nil)
	wait := startBackground(t, nil, "--home", home, "run", "--tool", "shell", "--project", "busy", "echo started; sleep 60")
	pollUntil(t, 30*time.Second, "busy/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "busy", "S01").Status == domain.Running
	})
	r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "echo handed > h.txt")
	if r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") {
		t.Fatalf("run while a controller runs: %s", r)
	}
	_, out := oneOffOutput(t, r)
	if got := readFile(t, filepath.Join(out, "h.txt")); got != "handed\n" {
		t.Errorf("h.txt = %q", got)
	}
	if r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "--project", "busy", "echo x"); r.code != 2 || !strings.Contains(r.stderr, "has not ended") {
		t.Errorf("run of a project whose run goes on: %s", r)
	}
	if !strings.Contains(readFile(t, filepath.Join(home, "specs", "busy", runSpecFile(t, home, "busy"))), "sleep 60") {
		t.Error("the refused run replaced busy's spec")
	}
	if r := runDispatch(t, nil, "--home", home, "stop", "busy", "--kill"); r.code != 0 {
		t.Fatalf("stop busy: %s", r)
	}
	if r := wait(); r.code != 1 {
		t.Errorf("busy, stopped: %s", r)
	}
}

// runSpecFile is the name of the one task file of a one-off project.
func runSpecFile(t *testing.T, home, project string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(home, "specs", project, "S01-*.md"))
	if len(m) != 1 {
		t.Fatalf("specs/%s: %v", project, m)
	}
	return filepath.Base(m[0])
}

// TestOneOffPrintsItsOutput: a one-off run that passed prints what the
// task printed (its log: stdout and stderr), all of it, then where its
// files are.
func TestOneOffPrintsItsOutput(t *testing.T) {
	home, _ := opsHome(t, nil)
	r := runDispatch(t, nil, "--home", home, "run", "--tool", "shell", "echo out-marker; echo err-marker >&2; yes 0123456789abcdef | head -n 100000")
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	out, where := strings.Index(r.stdout, "out-marker\n"), strings.Index(r.stdout, "\noutput: ")
	if out < 0 || !strings.Contains(r.stdout, "err-marker\n") || where < out {
		t.Fatalf("run does not print the task's output before where its files are:\n%.2000s", r.stdout)
	}
	if n := strings.Count(r.stdout, "0123456789abcdef\n"); n != 100000 {
		t.Errorf("run printed %d of the 100000 lines the task printed", n)
	}
}
