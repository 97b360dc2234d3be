package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/agentcli"
	"github.com/dispatch-tool/dispatch/internal/fakeapi"
)

// TestRealAgentLoginInSandbox: on a `sandbox: on` node whose user is
// logged in to codex (~/.codex/auth.json holding an API key, as `codex
// login --with-api-key` leaves it) and no api_mode gives a key, the real
// codex runs in the sandbox with the copy of that login its private HOME
// got: the fake API sees exactly that key on every request. The task
// overwrites its copy (its shell command writes a planted key and reads it
// back); after the attempt the node user's auth.json is unchanged, and the
// copy is gone from the task's home while the settings (config.toml) stay.
func TestRealAgentLoginInSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	bin := agentcli.Dir(t)
	api := fakeapi.New(t, fakeapi.OpenAI)
	api.Command = `printf '{"OPENAI_API_KEY":"sk-planted-by-the-task"}' > "$HOME/.codex/auth.json" && cat "$HOME/.codex/auth.json"; echo; echo ran-the-command`
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-login-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	const key = "sk-fake-codex-login-5c2e81"
	auth := `{"OPENAI_API_KEY":"` + key + `"}` + "\n"
	// A provider of codex's login (requires_openai_auth): no env_key, the
	// key comes from auth.json alone.
	writeFile(t, filepath.Join(nodeHome, ".codex", "config.toml"), fmt.Sprintf(`model_provider = "fake"
model = "gpt-fake"
cli_auth_credentials_store = "file"
[model_providers.fake]
name = "fake"
base_url = "%s/v1"
requires_openai_auth = true
wire_api = "responses"
`, api.URL))
	writeFile(t, filepath.Join(nodeHome, ".codex", "auth.json"), auth)

	home := t.TempDir()
	work := filepath.Join(t.TempDir(), "work")
	writeFile(t, filepath.Join(home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: local
    ssh: null
    slots: 1
    work_dir: %s
    tool: codex
    api_mode: m
    sandbox: on
api_modes:
  m:
    env:
      PATH: %s
`, work, agentcli.PATH(t, bin)))
	dir := filepath.Join(home, "specs", "p")
	// The provider is in codex's config.toml, which dispatch does not
	// read: the default allow list of an agent under the sandbox (its
	// API only) lacks it.
	writeFile(t, filepath.Join(dir, "project.yaml"), fmt.Sprintf("integration: false\nmax_retries: 0\nnetwork: {allow: ['%s']}\n",
		strings.TrimPrefix(api.URL, "http://")))
	writeFile(t, filepath.Join(dir, "S01-run.md"), "Run the command.\n")
	env := []string{"HOME=" + nodeHome}
	for _, kv := range os.Environ() {
		// The test's own environment must not give codex a key or a home.
		if k, _, _ := strings.Cut(kv, "="); k == "OPENAI_API_KEY" || k == "CODEX_HOME" {
			env = append(env, k+"=")
		}
	}
	r := runDispatch(t, env, "--home", home, "start", "p")
	if r.code != 0 {
		t.Fatalf("start: %s\n%s", r, tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")))
	}

	reqs := api.Requests()
	var outputs []string
	for _, req := range reqs {
		if req.Key != key {
			t.Errorf("a request to %s carried the key %q, want %q (the node user's login)", req.Path, req.Key, key)
		}
		if req.ToolResult {
			outputs = append(outputs, req.ToolOutput)
		}
	}
	if len(reqs) == 0 {
		t.Fatal("codex sent no request")
	}
	// The task wrote its copy...
	if joined := strings.Join(outputs, "\n"); !strings.Contains(joined, "sk-planted-by-the-task") || !strings.Contains(joined, "ran-the-command") {
		t.Errorf("tool results %q: want the planted key read back from the task's own auth.json", outputs)
	}
	// ...and neither reached the node user's login nor stayed behind.
	if got := readFile(t, filepath.Join(nodeHome, ".codex", "auth.json")); got != auth {
		t.Errorf("the node user's auth.json: %q, want it unchanged %q", got, auth)
	}
	taskHome := filepath.Join(work, "p", "tasks", "S01", "home")
	if _, err := os.Lstat(filepath.Join(taskHome, ".codex", "auth.json")); err == nil || !os.IsNotExist(err) {
		t.Errorf("the task's home still holds auth.json (%v), want the copy removed at the attempt's end", err)
	}
	if fi, err := os.Stat(filepath.Join(taskHome, ".codex", "config.toml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the task's config.toml: %v (%v), want the copy kept, mode 0600", fi, err)
	}
}
