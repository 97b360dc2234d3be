package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// nodesJSON is `dispatch nodes --json`.
type nodesJSON struct {
	Nodes []readmodel.NodeListEntry `json:"nodes"`
}

func listNodes(t *testing.T, h *sshHome) map[string]readmodel.NodeListEntry {
	t.Helper()
	r := h.run(t, "nodes", "--json")
	if r.code != 0 {
		t.Fatalf("nodes --json: %s", r)
	}
	var out nodesJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("nodes --json: %v\n%s", err, r)
	}
	m := map[string]readmodel.NodeListEntry{}
	for _, n := range out.Nodes {
		m[n.Name] = n
	}
	return m
}

// TestNodesCheckIsRecorded: `dispatch nodes` shows what `nodes check` saw —
// online with facts for a good node, offline with the error for a node with
// an unknown host key or a closed port — and a check while another process
// holds the home's lock (a running controller) records nothing, saying so.
func TestNodesCheckIsRecorded(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	good := c.StartServer(t, "good")
	c.Trust(t, good)
	unknown := c.StartServer(t, "unknown")
	closed := sshdtest.FreePort(t)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  ssh_connect_timeout: 2s
nodes:
  - name: good
    ssh: %s@127.0.0.1:%d
    work_dir: %s
    limits: {memory: 4GiB, pids: 512}
  - name: unknown
    ssh: %s@127.0.0.1:%d
    work_dir: %s
  - name: closed
    ssh: %s@127.0.0.1:%d
    work_dir: /nonexistent
`, c.User, good.Port, good.WorkDir, c.User, unknown.Port, unknown.WorkDir, c.User, closed))

	for _, n := range listNodes(t, h) {
		if n.State != "unknown" {
			t.Fatalf("before any check, %s is %s", n.Name, n.State)
		}
	}
	r0 := h.run(t, "nodes", "check")
	if r0.code != 1 {
		t.Fatalf("nodes check: want exit 1: %s", r0)
	}
	// Which enforcement of limits applies there (issue 20): cgroups where
	// the test's user can write one (root), else rlimits and the watchdog.
	want := "good: limits: rlimits+watchdog (memory and pids: the wrapper's watchdog; file_size: RLIMIT_FSIZE; cpu is not enforced: it needs cgroups); node default: memory 4GiB, pids 512"
	if _, rest, ok := strings.Cut(r0.stdout, "good: limits: cgroup v"); ok {
		enforcement, _, _ := strings.Cut("cgroup v"+rest, " (memory")
		enforcement, _, _ = strings.Cut(enforcement, " (pids")
		want = "good: limits: " + limitsText(enforcement, "memory 4GiB, pids 512")
	}
	if !strings.Contains(r0.stdout, want) {
		t.Errorf("nodes check does not say how limits are enforced: want %q in\n%s", want, r0.stdout)
	}
	got := listNodes(t, h)
	if g := got["good"]; g.State != "online" || g.LastSeen == "" || g.OS == "" || g.WrapperVersion == "" || g.MemAvailableBytes <= 0 || g.LastError != "" {
		t.Errorf("good after the check: %+v", g)
	}
	if u := got["unknown"]; u.State != "offline" || !strings.Contains(u.LastError, "dispatch nodes trust unknown") {
		t.Errorf("unknown after the check: %+v", u)
	}
	if cl := got["closed"]; cl.State != "offline" || cl.LastError == "" {
		t.Errorf("closed after the check: %+v", cl)
	}
	// The table shows it too.
	if r := h.run(t, "nodes"); !strings.Contains(r.stdout, "online") || !strings.Contains(r.stdout, "offline") {
		t.Errorf("nodes: %s", r)
	}

	// A controller holds the lock: the check does not write the database.
	c.Trust(t, unknown)
	lock, err := home.AcquireLock(h.home)
	if err != nil {
		t.Fatal(err)
	}
	r := h.run(t, "nodes", "check")
	lock.Release()
	if r.code != 1 || !strings.Contains(r.stderr, "not recorded") {
		t.Errorf("check while locked: %s", r)
	}
	if u := listNodes(t, h)["unknown"]; u.State != "offline" {
		t.Errorf("a check under another's lock recorded unknown as %s", u.State)
	}
	// Without the lock, the now trusted node is recorded online.
	h.run(t, "nodes", "check")
	if u := listNodes(t, h)["unknown"]; u.State != "online" || u.LastError != "" {
		t.Errorf("unknown after trust and check: %+v", u)
	}
}

func TestParseGitVersion(t *testing.T) {
	for in, want := range map[string]string{
		"git version 2.39.5\n":                 "2.39.5",
		"git version 2.39.5 (Apple Git-146)\n": "2.39.5",
		"git version 2.47.0.windows.1\n":       "2.47.0.windows.1",
		"bash: git: command not found\n":       "",
		"git version \x1b[31mred\x1b[0m\n":     "",
		"git version 2.39.5; rm -rf /\n":       "2.39.5",
		"":                                     "",
	} {
		if got := parseGitVersion(in); got != want {
			t.Errorf("parseGitVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSandboxConsequence: where the sandbox is unavailable, `nodes check`
// says what that means for the node's tasks under its setting: with the
// default, auto, they run unsandboxed; with on, none runs there.
func TestSandboxConsequence(t *testing.T) {
	for setting, want := range map[string]string{
		"auto": ", so its tasks run unsandboxed (sandbox: auto)",
		"on":   ", so no task can run there (sandbox: on)",
		"off":  "",
	} {
		if got := sandboxConsequence(setting); got != want {
			t.Errorf("sandboxConsequence(%q) = %q, want %q", setting, got, want)
		}
	}
}
