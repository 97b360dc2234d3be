package controller

import "testing"

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
