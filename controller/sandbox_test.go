package controller

import (
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
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
	} {
		n := nodes.Node{Name: "a", Sandbox: c.nodeSandbox, Network: c.nodeNetwork}
		sb, net, ok, why := taskLaunch(c.sandbox, c.network, n)
		if sb != c.sb || net != c.net || ok != c.ok || (ok == (why != "")) {
			t.Errorf("task sandbox %q network %q on node sandbox %q network %q: %q, %q, %v, %q; want %q, %q, %v",
				c.sandbox, c.network, c.nodeSandbox, c.nodeNetwork, sb, net, ok, why, c.sb, c.net, c.ok)
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
