package policy

import (
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
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
// else open for a shell task; network: none makes the sandbox required
// (bwrap even where the node says auto) and cannot run where the task or
// the node says off.
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
		got, ok, why := TaskLaunch(c.sandbox, c.network, "shell", n)
		if got.Sandbox != c.sb || got.Network != c.net || got.Default || ok != c.ok || (ok == (why != "")) {
			t.Errorf("task sandbox %q network %q on node sandbox %q network %q: %+v, %v, %q; want %q, %q, %v",
				c.sandbox, c.network, c.nodeSandbox, c.nodeNetwork, got, ok, why, c.sb, c.net, c.ok)
		}
	}
}

// TestAgentNetworkDefault: which network a launch gets when no spec,
// project or node sets one (issue 32): an agent CLI that may run under the
// sandbox gets the empty allow list (its API only), as a default the
// wrapper drops where sandbox: auto finds no bwrap; an agent that never
// runs sandboxed, the shell and a tool of nodes.yaml keep the node's
// network; a setting anywhere overrides the default, and the default never
// makes a node ineligible.
func TestAgentNetworkDefault(t *testing.T) {
	for _, c := range []struct {
		name                                             string
		tool, sandbox, network, nodeSandbox, nodeNetwork string
		want                                             Confinement
		ok                                               bool
	}{
		{"claude on a sandbox: on node", "claude", "", "", "on", "", Confinement{"bwrap", "allow:", true}, true},
		{"codex where bwrap may work", "codex", "", "", "auto", "", Confinement{"auto", "allow:", true}, true},
		{"gemini sandboxed by its spec", "gemini", "on", "", "auto", "", Confinement{"bwrap", "allow:", true}, true},
		{"claude on a node that never sandboxes", "claude", "", "", "off", "", Confinement{"", "open", false}, true},
		{"claude with sandbox: off", "claude", "off", "", "auto", "", Confinement{"", "open", false}, true},
		{"the shell keeps open", "shell", "", "", "on", "", Confinement{"bwrap", "open", false}, true},
		{"a tool of nodes.yaml keeps open", "my-agent", "", "", "auto", "", Confinement{"auto", "open", false}, true},
		{"network: open on the project", "claude", "", "open", "on", "", Confinement{"bwrap", "open", false}, true},
		{"network: open on the node", "claude", "", "", "auto", "open", Confinement{"auto", "open", false}, true},
		{"the node's allow list", "claude", "", "", "auto", "allow:x.com:443", Confinement{"bwrap", "allow:x.com:443", false}, true},
		{"the spec's allow list", "claude", "", "allow:pypi.org:443", "on", "", Confinement{"bwrap", "allow:pypi.org:443", false}, true},
		{"network: none", "claude", "", "none", "auto", "open", Confinement{"bwrap", "none", false}, true},
		{"sandbox: on where the node has it off", "claude", "on", "", "off", "", Confinement{"", "open", false}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := nodes.Node{Name: "a", Sandbox: c.nodeSandbox, Network: c.nodeNetwork}
			got, ok, why := TaskLaunch(c.sandbox, c.network, c.tool, n)
			if got != c.want || ok != c.ok || (ok == (why != "")) {
				t.Errorf("TaskLaunch(%q, %q, %q, %+v) = %+v, %v, %q; want %+v, %v", c.sandbox, c.network, c.tool, n, got, ok, why, c.want, c.ok)
			}
		})
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
		got, err := NetworkAllow(c.network, c.tool, c.env)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("NetworkAllow(%q, %q, %v) = %q, %v; want %q", c.network, c.tool, c.env, got, err, c.want)
		}
	}
}
