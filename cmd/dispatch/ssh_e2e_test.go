package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// sshHome is a dispatch home whose operator side ($HOME with .ssh/) is an
// sshdtest client.
type sshHome struct {
	home   string
	client *sshdtest.Client
	env    []string
}

func newSSHHome(t *testing.T) *sshHome {
	t.Helper()
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	home := t.TempDir()
	// The operator's ~/.ssh is the client's; no ssh-agent of the machine
	// running the tests takes part.
	return &sshHome{home: home, client: c, env: []string{"HOME=" + c.Home, "SSH_AUTH_SOCK="}}
}

func (h *sshHome) run(t *testing.T, args ...string) result {
	t.Helper()
	return runDispatch(t, h.env, append([]string{"--home", h.home}, args...)...)
}

// spreadProject writes n shell tasks that record the node they ran on.
func spreadProject(t *testing.T, home, name string, n int) {
	t.Helper()
	dir := filepath.Join(home, "specs", name)
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	for i := 1; i <= n; i++ {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("S%02d-task.md", i)),
			fmt.Sprintf("# Task %d\necho \"$DISPATCH_NODE\" > node.txt\nsleep 0.5\necho task %d done\n", i, i))
	}
}

func TestSSHBatchAcrossNodes(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	s1 := c.StartServer(t, "n1")
	s2 := c.StartServer(t, "n2")
	s3 := c.StartServer(t, "n3")
	hung := c.StartServer(t, "hung")
	for _, s := range []*sshdtest.Server{s1, s2, s3, hung} {
		c.Trust(t, s)
	}
	c.AddAlias(t, "n1alias", s1)
	c.AddAlias(t, "hungalias", hung)
	closedPort := sshdtest.FreePort(t)
	local := filepath.Join(t.TempDir(), "local-work")
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
  ssh_connect_timeout: 1s
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: local
    slots: 1
    work_dir: %s
  - name: n1
    ssh: n1alias
    slots: 3
    work_dir: %s
  - name: n2
    ssh: "ssh -i %s -p %d -l %s 127.0.0.1"
    slots: 3
    work_dir: %s
  - name: n3
    ssh: %s@127.0.0.1:%d
    slots: 3
    work_dir: %s
  - name: hung
    ssh: hungalias
    slots: 3
    work_dir: %s
  - name: closed
    ssh: %s@127.0.0.1:%d
    slots: 3
    work_dir: %s
`, local, s1.WorkDir, c.KeyFile, s2.Port, c.User, s2.WorkDir, c.User, s3.Port, s3.WorkDir, hung.WorkDir, c.User, closedPort, filepath.Join(t.TempDir(), "never")))
	spreadProject(t, h.home, "spread", 14)
	// A hung machine: sshd and its connections stopped; TCP still connects.
	hung.PauseAll(t)

	start := time.Now()
	r := h.run(t, "start", "spread")
	wall := time.Since(start)
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	t.Logf("14 tasks over 3 SSH nodes + local (one node hung, one port closed): %s", wall.Round(10*time.Millisecond))

	st, res := getStatus(t, h.home, "spread")
	_ = res
	byNode := map[string]int{}
	for _, tk := range st.Tasks {
		if tk.Status != "completed" {
			t.Errorf("%s = %s (%s)", tk.ID, tk.Status, tk.Error)
		}
		byNode[tk.Node]++
		got := strings.TrimSpace(readFile(t, filepath.Join(h.home, "runs", "spread", tk.ID, "output", "node.txt")))
		if got != tk.Node {
			t.Errorf("%s ran on %q by its own account, status says %q", tk.ID, got, tk.Node)
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if byNode[n] == 0 {
			t.Errorf("no task ran on %s: %v", n, byNode)
		}
	}
	if byNode["hung"]+byNode["closed"] > 0 {
		t.Errorf("tasks ran on unreachable nodes: %v", byNode)
	}
	states := map[string]string{}
	for _, n := range st.Nodes {
		states[n.Name] = n.State
	}
	if states["hung"] != "offline" || states["closed"] != "offline" || states["n1"] != "online" {
		t.Errorf("node states = %v", states)
	}
	// The wrapper was installed on each SSH node under its work_dir.
	for _, s := range []*sshdtest.Server{s1, s2, s3} {
		m, _ := filepath.Glob(filepath.Join(s.WorkDir, ".bin", "dispatch-wrapper-*"))
		if len(m) != 1 {
			t.Errorf("%s: wrappers installed = %v", s.Name, m)
		}
	}

	// dispatch nodes reads what the controller learned.
	r = h.run(t, "nodes", "--json")
	if r.code != 0 {
		t.Fatalf("nodes --json: %s", r)
	}
	var nv struct {
		Nodes []struct {
			Name           string  `json:"name"`
			State          string  `json:"state"`
			WrapperVersion string  `json:"wrapper_version"`
			LastError      string  `json:"last_error"`
			RTT            float64 `json:"rtt_ms"`
			Mem            int64   `json:"mem_available_bytes"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &nv); err != nil {
		t.Fatalf("nodes --json: %v\n%s", err, r.stdout)
	}
	for _, n := range nv.Nodes {
		switch n.Name {
		case "n1", "n2", "n3":
			if n.State != "online" || n.Mem <= 0 || n.RTT <= 0 {
				t.Errorf("nodes: %+v", n)
			}
		case "hung", "closed":
			if n.State != "offline" || n.LastError == "" {
				t.Errorf("nodes: %+v", n)
			}
		}
	}

	// nodes check: the reachable ones pass, the others fail, exit 1.
	start = time.Now()
	r = h.run(t, "nodes", "check", "--json")
	t.Logf("dispatch nodes check of 6 nodes (2 failing): %s", time.Since(start).Round(10*time.Millisecond))
	if r.code != 1 {
		t.Fatalf("nodes check with a hung and a closed node: %s", r)
	}
	var cv struct {
		Nodes []struct {
			Name  string  `json:"name"`
			OK    bool    `json:"ok"`
			Skew  float64 `json:"clock_skew_seconds"`
			Git   string  `json:"git_version"`
			Error string  `json:"error"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cv); err != nil {
		t.Fatalf("nodes check --json: %v\n%s", err, r.stdout)
	}
	for _, n := range cv.Nodes {
		wantOK := n.Name != "hung" && n.Name != "closed"
		if n.OK != wantOK {
			t.Errorf("check %s ok=%v (%s)", n.Name, n.OK, n.Error)
		}
		if wantOK && (n.Skew > 2 || n.Skew < -2) {
			t.Errorf("check %s: clock skew %.2fs on the same machine", n.Name, n.Skew)
		}
		// make test installs git: every reachable node has it.
		if wantOK && !regexp.MustCompile(`^[0-9]+\.[0-9]+`).MatchString(n.Git) {
			t.Errorf("check %s: git_version %q", n.Name, n.Git)
		}
	}
}

// freshNodeHome is a home with one node, fresh, on an sshd whose host key
// the operator has not trusted yet.
func freshNodeHome(t *testing.T) (*sshHome, *sshdtest.Client, *sshdtest.Server) {
	t.Helper()
	h := newSSHHome(t)
	c := h.client
	s := c.StartServer(t, "fresh")
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  ssh_connect_timeout: 2s
nodes:
  - name: fresh
    ssh: %s@127.0.0.1:%d
    work_dir: %s
`, c.User, s.Port, s.WorkDir))
	return h, c, s
}

func TestNodesTrust(t *testing.T) {
	h, c, s := freshNodeHome(t)

	r := h.run(t, "nodes", "check")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "dispatch nodes trust fresh") {
		t.Fatalf("check of an unknown host: %s", r)
	}
	// Without --yes and without a terminal, nothing is recorded.
	r = h.run(t, "nodes", "trust", "fresh")
	if r.code != 2 || !strings.Contains(r.stdout, "SHA256:") || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("trust without --yes: %s", r)
	}
	if b, _ := os.ReadFile(c.KnownHosts); len(b) != 0 {
		t.Fatalf("known_hosts written without --yes: %q", b)
	}
	r = h.run(t, "nodes", "trust", "fresh", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "recorded") {
		t.Fatalf("trust --yes: %s", r)
	}
	if r = h.run(t, "nodes", "check"); r.code != 0 {
		t.Fatalf("check after trust: %s", r)
	}
	if r = h.run(t, "nodes", "trust", "fresh"); r.code != 0 || !strings.Contains(r.stdout, "already trusted") {
		t.Fatalf("trust again: %s", r)
	}
	// A changed key is refused loudly, and trust does not paper over it.
	s.RotateHostKey(t)
	r = h.run(t, "nodes", "check")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "HOST KEY CHANGED") {
		t.Fatalf("check after the key changed: %s", r)
	}
	r = h.run(t, "nodes", "trust", "fresh", "--yes")
	if r.code != 1 || !strings.Contains(r.stderr, "HOST KEY CHANGED") {
		t.Fatalf("trust of a changed key: %s", r)
	}
}

// TestNodesTrustFromAPipe: `echo y | dispatch nodes trust NODE` records
// the key, as the README's quickstart shows, after printing its
// fingerprint; any other answer, or none, records nothing.
func TestNodesTrustFromAPipe(t *testing.T) {
	h, c, _ := freshNodeHome(t)
	trust := func(answer string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		defer cancel()
		cmd, stdout, stderr := dispatchCmd(ctx, h.env, "--home", h.home, "nodes", "trust", "fresh")
		cmd.Stdin = strings.NewReader(answer)
		return wait(t, ctx, cmd, stdout, stderr)
	}
	if r := trust("n\n"); r.code != 1 || !strings.Contains(r.stdout, "SHA256:") || !strings.Contains(r.stderr, "not recorded") {
		t.Fatalf("trust answered n from a pipe: %s", r)
	}
	if b, _ := os.ReadFile(c.KnownHosts); len(b) != 0 {
		t.Fatalf("known_hosts written after n: %q", b)
	}
	r := trust("y\n")
	if r.code != 0 || !strings.Contains(r.stdout, "SHA256:") || !strings.Contains(r.stdout, "recorded") {
		t.Fatalf("trust answered y from a pipe: %s", r)
	}
	if r := h.run(t, "nodes", "check"); r.code != 0 {
		t.Fatalf("check after trust: %s", r)
	}
}

// TestStartConnectsOncePerNode: `start` asks each node for its tools and
// then runs the project over the same connection: one SSH login per node
// (sshd's own log, at LogLevel INFO), not one for the check and another
// for the run.
func TestStartConnectsOncePerNode(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	s := c.StartServerWith(t, "once", "LogLevel INFO")
	c.Trust(t, s)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf("nodes:\n  - name: n1\n    ssh: %s@127.0.0.1:%d\n    work_dir: %s\n",
		c.User, s.Port, s.WorkDir))
	spreadProject(t, h.home, "p", 2)
	if r := h.run(t, "start", "p"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	if n := strings.Count(s.Log(), "Accepted publickey"); n != 1 {
		t.Errorf("start logged in %d times, want once:\n%s", n, s.Log())
	}
}
