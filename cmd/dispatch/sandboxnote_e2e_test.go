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
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-sandbox-note-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
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
