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
		sb, net, ok, why := TaskLaunch(c.sandbox, c.network, n)
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
		got, err := NetworkAllow(c.network, c.tool, c.env)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("NetworkAllow(%q, %q, %v) = %q, %v; want %q", c.network, c.tool, c.env, got, err, c.want)
		}
	}
}
