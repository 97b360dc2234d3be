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
