package controller

import (
	"context"
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// TestSandboxLaunch: what launch.json asks of the wrapper for each task
// setting on each node setting, and where a task may not run.
func TestSandboxLaunch(t *testing.T) {
	for _, c := range []struct {
		task, node, want string
		ok               bool
	}{
		{"", "", "", true}, {"off", "", "", true}, {"auto", "", "", true}, {"on", "", "", false},
		{"", "off", "", true}, {"on", "off", "", false},
		{"", "on", "bwrap", true}, {"auto", "on", "bwrap", true}, {"on", "on", "bwrap", true}, {"off", "on", "", false},
		{"", "auto", "auto", true}, {"auto", "auto", "auto", true}, {"on", "auto", "bwrap", true}, {"off", "auto", "", true},
	} {
		got, ok, why := sandboxLaunch(c.task, c.node)
		if got != c.want || ok != c.ok || (ok == (why != "")) {
			t.Errorf("task %q on node %q: %q, %v, %q; want %q, %v", c.task, c.node, got, ok, why, c.want, c.ok)
		}
	}
}

// TestTaskLaunchNetwork: a task's network is its own, else the node's,
// else open; network: none makes the sandbox required (bwrap even where
// the node says auto) and cannot run where the task or the node says off.
func TestTaskLaunchNetwork(t *testing.T) {
	for _, c := range []struct {
		sandbox, network, nodeSandbox, nodeNetwork string
		sb, net                                    string
		ok                                         bool
	}{
		{"", "", "", "", "", "open", true},
		{"", "", "on", "", "bwrap", "open", true},
		{"", "open", "auto", "none", "auto", "open", true},
		{"", "none", "on", "", "bwrap", "none", true},
		{"", "none", "auto", "", "bwrap", "none", true},
		{"auto", "none", "auto", "", "bwrap", "none", true},
		{"", "", "auto", "none", "bwrap", "none", true},
		{"", "none", "", "", "", "none", false},
		{"", "none", "off", "", "", "none", false},
		{"off", "none", "auto", "", "", "none", false},
		{"off", "", "auto", "none", "", "none", false},
		{"on", "open", "off", "", "", "open", false},
		{"", "allow:a.com:443", "auto", "", "bwrap", "allow:a.com:443", true},
		{"", "", "on", "allow:", "bwrap", "allow:", true},
		{"", "allow:", "off", "", "", "allow:", false},
		{"off", "allow:", "auto", "", "", "allow:", false},
	} {
		n := nodes.Node{Name: "a", Sandbox: c.nodeSandbox, Network: c.nodeNetwork}
		sb, net, ok, why := taskLaunch(c.sandbox, c.network, n)
		if sb != c.sb || net != c.net || ok != c.ok || (ok == (why != "")) {
			t.Errorf("task sandbox %q network %q on node sandbox %q network %q: %q, %q, %v, %q; want %q, %q, %v",
				c.sandbox, c.network, c.nodeSandbox, c.nodeNetwork, sb, net, ok, why, c.sb, c.net, c.ok)
		}
	}
}

// TestNetworkAllowLaunch: launch.json's allow list is the task's, the
// tool's provider's hosts and the host of every URL among the api_mode's
// values, sorted, each once; other values (keys, words) add nothing.
func TestNetworkAllowLaunch(t *testing.T) {
	for _, c := range []struct {
		network, tool string
		env           map[string]string
		want          []string
	}{
		{"allow:", "shell", nil, []string{}},
		{"allow:db.internal:5432", "shell", map[string]string{"API_KEY": "sk-1", "X": "not a url"}, []string{"db.internal:5432"}},
		{"allow:", "claude", nil, []string{"api.anthropic.com:443", "console.anthropic.com:443"}},
		{"allow:127.0.0.1:9", "claude", map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/v1", "ANTHROPIC_API_KEY": "sk-ant"},
			[]string{"127.0.0.1:8080", "127.0.0.1:9", "api.anthropic.com:443", "console.anthropic.com:443"}},
		{"allow:", "my-tool", map[string]string{"BASE": "https://llm.corp.example", "WS": "wss://[::1]:9000/x", "F": "ftp://x.com"},
			[]string{"[::1]:9000", "llm.corp.example:443"}},
	} {
		got, err := networkAllow(c.network, c.tool, c.env)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("networkAllow(%q, %q, %v) = %q, %v; want %q", c.network, c.tool, c.env, got, err, c.want)
		}
	}
}

// TestSandboxPathsLaunch: a node's sandbox_paths reach launch.json as
// nodes.yaml writes them (the wrapper expands ~/ on the node).
func TestSandboxPathsLaunch(t *testing.T) {
	if got := sandboxPaths(nodes.SandboxPaths{}); got != nil {
		t.Errorf("no sandbox_paths: %+v, want none", got)
	}
	got := sandboxPaths(nodes.SandboxPaths{RO: []string{"~/go/pkg/mod"}, RW: []string{"/opt/cache"}})
	want := &wrapper.SandboxPaths{RO: []string{"~/go/pkg/mod"}, RW: []string{"/opt/cache"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox_paths: %+v, want %+v", got, want)
	}
}

// TestPhaseTasksTakeTheProjectsSandbox: a project.yaml that says
// `sandbox: on` (and limits) runs its phase tasks as it runs its own: the
// author's S99 and a generated V01 carry the project's sandbox and limits,
// and S99's attempt ran under bwrap. They used to run with the node's say.
func TestPhaseTasksTakeTheProjectsSandbox(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 10s
  max_retries: 0
nodes:
  - name: local
    slots: 2
    work_dir: WORK
    sandbox: auto
`
	h := newHarness(t, yaml, map[string]string{
		"project.yaml": "tool: shell\nsandbox: on\nlimits: {pids: 500}\nmax_fix_rounds: 0\n",
		"S01-a.md":     "echo a > a.txt\n",
		"S99-i.md":     "echo integrated > INTEGRATION.md\n",
	})
	h.tickUntil("V01 to be made", func() bool {
		_, err := h.st.Task(context.Background(), "p", "V01")
		return err == nil
	})
	for _, id := range []string{"S99", "V01"} {
		if tk := h.task(id); tk.Sandbox != "on" || tk.Limits.Pids != 500 {
			t.Errorf("%s: sandbox %q, limits %+v; want the project's (on, pids 500)", id, tk.Sandbox, tk.Limits)
		}
	}
	runs, err := h.st.Runs(context.Background(), "p", "S99")
	if err != nil || len(runs) == 0 || runs[len(runs)-1].Sandbox != "bwrap" {
		t.Fatalf("S99's attempt: %+v, %v; want it run under bwrap", runs, err)
	}
	h.tickUntil("the project to end", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == store.ProjectDone
	})
}
