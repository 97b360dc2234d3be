package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/agentcli"
	"github.com/dispatch-tool/dispatch/internal/fakeapi"
)

// autonomyRun runs one task of cli on a local node with sandbox: sandbox,
// the node user's HOME nodeHome, the fake API answering the prompt with a
// call of the CLI's shell tool running command; it returns the dispatch
// home, the tool results the fake API saw and start's result. network,
// when set, is project.yaml's network (API in it: the fake API's
// host:port).
func autonomyRun(t *testing.T, cli realCLI, bin, sandbox, nodeHome, command string, network ...string) (home string, outputs []string, r result) {
	t.Helper()
	extra := "max_retries: 0\n"
	for _, n := range network {
		extra += "network: " + n + "\n"
	}
	home, _, outputs, r = autonomyRunWith(t, cli, bin, sandbox, nodeHome, command, extra)
	return home, outputs, r
}

// autonomyRunWith is autonomyRun with extra lines for project.yaml ("API"
// in them is the fake API's host:port); it returns the fake API too.
func autonomyRunWith(t *testing.T, cli realCLI, bin, sandbox, nodeHome, command, extra string) (home string, api *fakeapi.Server, outputs []string, r result) {
	t.Helper()
	api = fakeapi.New(t, cli.provider)
	api.Command = command
	home = t.TempDir()
	work := filepath.Join(t.TempDir(), "work")
	key := "sk-fake-" + cli.tool + "-autonomy-3e91c0"
	// The CLI's settings go into the attempt's HOME by the project's
	// setup: under bwrap the tool sees a private HOME, not the api_mode's.
	cliHome, err := os.MkdirTemp("/var/tmp", "dispatch-cli-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cliHome) })
	if cli.setup != nil {
		cli.setup(t, api, cliHome)
	}
	env := cli.env(api, cliHome)
	delete(env, "HOME")
	delete(env, "CODEX_HOME")
	var modeEnv strings.Builder
	fmt.Fprintf(&modeEnv, "      %s: ${KEY}\n      PATH: %s\n", cli.keyVar, agentcli.PATH(t, bin))
	for k, v := range env {
		fmt.Fprintf(&modeEnv, "      %s: %s\n", k, v)
	}
	writeFile(t, filepath.Join(home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: local
    ssh: null
    slots: 1
    work_dir: %s
    tool: %s
    api_mode: m
    sandbox: %s
api_modes:
  m:
    env:
%s`, work, cli.tool, sandbox, modeEnv.String()))
	dir := filepath.Join(home, "specs", "p")
	project := fmt.Sprintf("integration: false\nsetup: cp -R %s/. \"$HOME\"/\n", cliHome)
	project += strings.ReplaceAll(extra, "API", strings.TrimPrefix(api.URL, "http://"))
	writeFile(t, filepath.Join(dir, "project.yaml"), project)
	writeFile(t, filepath.Join(dir, "S01-run.md"), "Run the command.\n")
	r = runDispatch(t, []string{"HOME=" + nodeHome, "KEY=" + key}, "--home", home, "start", "p")
	for _, req := range api.Requests() {
		if req.ToolResult {
			outputs = append(outputs, req.ToolOutput)
		}
	}
	return home, api, outputs, r
}

// TestRealAgentShellInSandbox: on a `sandbox: on` local node each real
// agent CLI runs with its own approval prompts off, so the shell command
// its (fake) model asks for runs: made.txt is written and collected, while
// the node user's key, read by its absolute path in the same command, is
// out of sight. With sandbox: auto, where bwrap works, claude does the
// same. Unconfined (sandbox: off) claude keeps its safe mode: the same
// command is refused and nothing is made.
func TestRealAgentShellInSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	bin := agentcli.Dir(t)
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-autonomy-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	const secret = "SECRET-KEY-MATERIAL-77"
	keyPath := filepath.Join(nodeHome, ".ssh", "id_test")
	writeFile(t, keyPath, secret+"\n")
	command := "echo ok > made.txt; cat '" + keyPath + "' > stolen.txt 2>&1; cat '" + keyPath + "'; echo ran-the-command"

	for _, cli := range realCLIs {
		t.Run(cli.tool, func(t *testing.T) {
			// An agent under the sandbox reaches only its API by default:
			// codex's (fake) one is in its config.toml, which dispatch
			// does not read, so the project names it.
			var network []string
			if cli.tool == "codex" {
				network = append(network, "{allow: ['API']}")
			}
			home, outputs, r := autonomyRun(t, cli, bin, "on", nodeHome, command, network...)
			out := filepath.Join(home, "runs", "p", "S01", "output")
			if r.code != 0 {
				t.Fatalf("start: %s\n%s\ntool results: %q", r, tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")), outputs)
			}
			if got, err := os.ReadFile(filepath.Join(out, "made.txt")); err != nil || string(got) != "ok\n" {
				t.Errorf("made.txt = %q (%v), want ok; tool results: %q", got, err, outputs)
			}
			if got := readFile(t, filepath.Join(out, "stolen.txt")); strings.Contains(got, secret) {
				t.Errorf("the sandboxed agent read the node user's key: %q", got)
			}
			joined := strings.Join(outputs, "\n")
			if !strings.Contains(joined, "ran-the-command") || strings.Contains(joined, secret) {
				t.Errorf("tool results: %q; want the command's output, without the key", outputs)
			}
		})
	}

	// With sandbox: auto the controller cannot know; the wrapper, finding
	// that bwrap works, runs the autonomous command.
	claude := realCLIs[0]
	home, outputs, r := autonomyRun(t, claude, bin, "auto", nodeHome, command)
	if got, err := os.ReadFile(filepath.Join(home, "runs", "p", "S01", "output", "made.txt")); r.code != 0 || err != nil || string(got) != "ok\n" {
		t.Errorf("sandbox: auto: %s; made.txt %q (%v); tool results %q", r, got, err, outputs)
	}
	// The attempt ran autonomously because it was confined: the report
	// says bwrap, not that permission checks were off (dangerous: true).
	rep := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "report", "p", "--format", "json")
	var rv struct {
		Dangerous []string `json:"dangerous"`
		Tasks     []struct {
			Attempts []struct {
				Dangerous bool   `json:"dangerous"`
				Sandbox   string `json:"sandbox"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(rep.stdout), &rv); err != nil || len(rv.Tasks) != 1 || len(rv.Tasks[0].Attempts) != 1 {
		t.Fatalf("report --format json: %v: %s", err, rep)
	}
	if a := rv.Tasks[0].Attempts[0]; len(rv.Dangerous) != 0 || a.Dangerous || a.Sandbox != "bwrap" {
		t.Errorf("report: dangerous %v, attempt %+v; want none dangerous, the attempt under bwrap", rv.Dangerous, a)
	}

	// Unconfined, claude's safe mode refuses the same command: the test
	// above can fail.
	home, outputs, r = autonomyRun(t, claude, bin, "off", nodeHome, command)
	if r.code != 0 {
		t.Fatalf("start with sandbox: off: %s", r)
	}
	if _, err := os.Stat(filepath.Join(home, "runs", "p", "S01", "output", "made.txt")); err == nil {
		t.Errorf("unconfined claude in safe mode ran the command")
	}
	if joined := strings.Join(outputs, "\n"); !strings.Contains(joined, "requires approval") || strings.Contains(joined, "ran-the-command") {
		t.Errorf("unconfined claude's tool result: %q, want the refusal", outputs)
	}
}

// TestRealAgentWithAllowList: each real agent CLI, sandboxed with a
// network allow list, reaches its (fake) API through dispatch's proxy and
// runs its shell command, whose connection to a host not in the list is
// refused and named in task.log. claude's and gemini's API is allowed
// because the api_mode's base URL names it (`allow: []`); codex's comes
// from its config.toml, so its list names it.
func TestRealAgentWithAllowList(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	bin := agentcli.Dir(t)
	nodeHome := t.TempDir()
	command := "echo ok > made.txt; curl -s -o /dev/null https://example.com/; echo curl-exit=$?; echo ran-the-command"
	for _, cli := range realCLIs {
		t.Run(cli.tool, func(t *testing.T) {
			network := "{allow: []}"
			if cli.tool == "codex" {
				network = "{allow: ['API']}"
			}
			home, outputs, r := autonomyRun(t, cli, bin, "on", nodeHome, command, network)
			log := tailOf(filepath.Join(home, "runs", "p", "S01", "task.log"))
			if r.code != 0 {
				t.Fatalf("start: %s\n%s\ntool results: %q", r, log, outputs)
			}
			if got, err := os.ReadFile(filepath.Join(home, "runs", "p", "S01", "output", "made.txt")); err != nil || string(got) != "ok\n" {
				t.Errorf("made.txt = %q (%v), want ok; tool results: %q", got, err, outputs)
			}
			joined := strings.Join(outputs, "\n")
			if !strings.Contains(joined, "ran-the-command") || strings.Contains(joined, "curl-exit=0") {
				t.Errorf("tool results: %q; want the command run, its curl refused", outputs)
			}
			if !strings.Contains(log, "network: refused a connection to example.com:443") {
				t.Errorf("task.log does not name the refused destination:\n%s", log)
			}
		})
	}
}
