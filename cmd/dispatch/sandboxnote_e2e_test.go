package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSandboxedFailureSaysSo: through the real binary, on a `sandbox: on`
// local node with a sandbox_paths rw, a shell task that writes /etc and
// one that writes into a directory of the node's /tmp fail; status (text
// and JSON), report.md's failures, the report's JSON and the MCP status
// and report say, after the task's own error, that it ran sandboxed, what
// it could write (the node's rw path among it) and the fix; the task that
// passes says nothing of it (issue 32 item 9).
func TestSandboxedFailureSaysSo(t *testing.T) {
	nodeHome := bwrapTempDir(t, "/var/tmp", "dispatch-sandbox-note-home-")
	hostTmp := t.TempDir() // under the node's /tmp, which the sandbox replaces
	writeFile(t, filepath.Join(nodeHome, ".cache", "pip", "keep"), "")
	home, work := opsHome(t, map[string]map[string]string{"p": {
		"S01-etc.md":  "---\nmax_retries: 0\n---\necho x > /etc/dispatch-note-test\n",
		"S02-tmp.md":  "---\nmax_retries: 0\n---\necho x > " + hostTmp + "/x\n",
		"S03-fine.md": "echo fine > fine.txt\n",
	}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n",
		"    work_dir: "+work+"\n    sandbox: on\n    sandbox_paths: {rw: [~/.cache/pip]}\n", 1))
	env := []string{"HOME=" + nodeHome}
	if r := runDispatch(t, env, "--home", home, "start", "p"); r.code != 1 {
		t.Fatalf("start: want exit 1 (two tasks fail): %s", r)
	}
	note := []string{"; it ran sandboxed (bwrap) on node local, where it may write only to output/ (its workspace)",
		"its own /tmp", "~/.cache/pip (sandbox_paths rw)", "Read-only file system", "sandbox_paths: {rw: [path]} in nodes.yaml", "sandbox: off"}
	hasNote := func(what, text string) {
		t.Helper()
		for _, s := range note {
			if !strings.Contains(text, s) {
				t.Errorf("%s lacks %q:\n%s", what, s, text)
			}
		}
	}

	st := runDispatch(t, env, "--home", home, "status", "p", "--json")
	var sv struct {
		Tasks []struct {
			ID, Status, Error string
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 3 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		if tk.ID == "S03" {
			if tk.Status != "completed" || strings.Contains(tk.Error, "sandboxed") {
				t.Errorf("S03: %s, error %q; want completed, no note", tk.Status, tk.Error)
			}
			continue
		}
		if tk.Status != "failed" || !strings.HasPrefix(tk.Error, "exit status 2; it ran sandboxed") {
			t.Errorf("%s: %s, error %q; want failed, its exit first, then the sandbox's note", tk.ID, tk.Status, tk.Error)
		}
		hasNote("status --json "+tk.ID, tk.Error)
	}
	hasNote("status", runDispatch(t, env, "--home", home, "status", "p").stdout)

	md := readFile(t, filepath.Join(home, "runs", "p", "report.md"))
	_, failures, _ := strings.Cut(md, "## Failures")
	for _, id := range []string{"S01", "S02"} {
		_, sec, _ := strings.Cut(failures, "### "+id)
		sec, _, _ = strings.Cut(sec, "\n### ")
		hasNote("report.md's failure of "+id, sec)
	}
	rep := runDispatch(t, env, "--home", home, "report", "p", "--format", "json")
	if !strings.Contains(rep.stdout, "it ran sandboxed (bwrap)") {
		t.Errorf("report --format json does not carry the note: %s", rep)
	}

	cs := mcpSession(t, home)
	for _, tool := range []string{"status", "report"} {
		res := callTool(t, cs, tool, map[string]any{"project": "p"})
		var text string
		for _, b := range res.Content {
			text += b.(*mcp.TextContent).Text
		}
		hasNote("mcp "+tool, text)
	}
}

// TestStartRefusesAToolTheSandboxCannotRun: a task whose tool lies under
// /tmp on a `sandbox: on` node, through the real binary. Before the
// node's wrapper is installed nobody knows: validate passes with its
// note, as before. Once `nodes check` installed it, the wrapper's probe
// knows and validate and start exit 2 before any attempt, naming the
// task, the node, why and the fix; the home is unchanged. On a node
// whose sandbox is off the same task runs (issue 32 item 4).
func TestStartRefusesAToolTheSandboxCannotRun(t *testing.T) {
	dir := bwrapTempDir(t, "/tmp", "dispatch-tool-under-tmp")
	tool := filepath.Join(dir, "mytool")
	writeFile(t, tool, "#!/bin/sh\necho ran > ran.txt\n")
	if err := os.Chmod(tool, 0o755); err != nil {
		t.Fatal(err)
	}
	home, work := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "---\ntool: tmptool\n---\nDo it.\n"}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	base := readFile(t, nodesYAML) + "tools:\n  tmptool: {command: [" + tool + ", \"{spec}\"]}\n"
	setSandbox := func(mode string) {
		writeFile(t, nodesYAML, strings.Replace(base, "    work_dir: "+work+"\n", "    work_dir: "+work+"\n    sandbox: "+mode+"\n", 1))
	}
	setSandbox("on")
	if r := runDispatch(t, nil, "--home", home, "validate", "p"); r.code != 0 || strings.Contains(r.stderr, "under /tmp") {
		t.Fatalf("validate before the node's wrapper is installed: want exit 0 and nothing new (the probe cannot know): %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "nodes", "check"); r.code != 0 {
		t.Fatalf("nodes check: %s", r)
	}
	before := tree(t, home)
	for _, cmd := range []string{"validate", "start"} {
		r := runDispatch(t, nil, "--home", home, cmd, "p")
		if r.code != 2 {
			t.Fatalf("%s: want exit 2: %s", cmd, r)
		}
		for _, want := range []string{"task S01 cannot run anywhere", "local (tool tmptool", "cannot run in the node's sandbox",
			"under /tmp", "install the tool outside /tmp", "sandbox: off"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, r.stderr)
			}
		}
	}
	assertTreeUnchanged(t, home, before)
	setSandbox("off")
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start on a node with sandbox: off: %s", r)
	}
	if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "ran.txt")); got != "ran\n" {
		t.Errorf("the tool did not run unconfined: ran.txt %q", got)
	}
}

// bwrapTempDir fails the test where bubblewrap is missing, else makes a
// directory in parent (a real one: the sandbox replaces /tmp), removed at
// the test's end.
func bwrapTempDir(t *testing.T, parent, prefix string) string {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
