package plan

import (
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// TestSameSettingsLimits: a pending task whose project.yaml limits changed
// (its spec text did not) takes the new limits on the next start.
func TestSameSettingsLimits(t *testing.T) {
	a := domain.Task{ID: "S01", Limits: yamlval.Limits{Memory: 1 << 30}}
	b := a
	if !sameSettings(a, b) {
		t.Fatal("equal tasks differ")
	}
	b.Limits.Memory = 2 << 30
	if sameSettings(a, b) {
		t.Error("a change of limits is not a change of settings")
	}
	// A pending task takes project.yaml's changed sandbox: too.
	c := a
	c.Sandbox = "on"
	if sameSettings(a, c) {
		t.Error("a change of sandbox is not a change of settings")
	}
	// And its changed network:.
	d := a
	d.Network = "none"
	if sameSettings(a, d) {
		t.Error("a change of network is not a change of settings")
	}
}

// TestDecideTaskSync: a start of a project under way adds a new task,
// leaves an unchanged one, keeps a started one's snapshot, and updates
// one that has not started (pending or blocked).
func TestDecideTaskSync(t *testing.T) {
	stored := domain.Task{ID: "S01", SpecHash: "h1", Status: domain.Pending}
	edited := stored
	edited.SpecHash = "h2"
	retitled := stored
	retitled.Title = "new title"
	for _, tc := range []struct {
		name  string
		old   domain.Task
		known bool
		nt    domain.Task
		want  taskSync
	}{
		{"new task", domain.Task{}, false, stored, syncAdd},
		{"unchanged", stored, true, stored, syncKeep},
		{"spec changed, pending", stored, true, edited, syncUpdate},
		{"settings changed, pending", stored, true, retitled, syncUpdate},
		{"spec changed, blocked", withStatus(stored, domain.Blocked), true, edited, syncUpdate},
		{"spec changed, running", withStatus(stored, domain.Running), true, edited, syncStarted},
		{"spec changed, completed", withStatus(stored, domain.Completed), true, edited, syncStarted},
		{"unchanged, completed", withStatus(stored, domain.Completed), true, withStatus(stored, domain.Completed), syncKeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideTaskSync(tc.old, tc.known, tc.nt); got != tc.want {
				t.Errorf("decideTaskSync = %d, want %d", got, tc.want)
			}
		})
	}
}

func withStatus(t domain.Task, s domain.Status) domain.Task {
	t.Status = s
	return t
}
