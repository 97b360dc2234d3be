package controller

import (
	"context"
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestSandboxPathsLaunch: a node's sandbox_paths reach launch.json as
// nodes.yaml writes them (the wrapper expands ~/ on the node).
func TestSandboxPathsLaunch(t *testing.T) {
	if got := sandboxPaths(nodes.SandboxPaths{}); got != nil {
		t.Errorf("no sandbox_paths: %+v, want none", got)
	}
	got := sandboxPaths(nodes.SandboxPaths{RO: []string{"~/go/pkg/mod"}, RW: []string{"/opt/cache"}})
	want := &wire.SandboxPaths{RO: []string{"~/go/pkg/mod"}, RW: []string{"/opt/cache"}}
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
	runs, err := h.st.Attempts(context.Background(), "p", "S99")
	if err != nil || len(runs) == 0 || runs[len(runs)-1].Sandbox != "bwrap" {
		t.Fatalf("S99's attempt: %+v, %v; want it run under bwrap", runs, err)
	}
	h.tickUntil("the project to end", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
}
