package controller

import (
	"testing"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestLaunchLimits: launch.json's limits are the task's (front matter over
// project.yaml, merged by spec), each one it does not set the node's.
func TestLaunchLimits(t *testing.T) {
	tests := []struct {
		name       string
		task, node yamlval.Limits
		want       *wire.Limits
	}{
		{"none", yamlval.Limits{}, yamlval.Limits{}, nil},
		{"node only", yamlval.Limits{}, yamlval.Limits{Memory: 8 << 30, Pids: 1024}, &wire.Limits{MemoryBytes: 8 << 30, Pids: 1024}},
		{"task over node", yamlval.Limits{Memory: 64 << 20, FileSize: 1 << 20}, yamlval.Limits{Memory: 8 << 30, Pids: 1024, CPU: 2},
			&wire.Limits{MemoryBytes: 64 << 20, CPU: 2, Pids: 1024, FileSizeBytes: 1 << 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := launchLimits(tc.task, tc.node)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("launchLimits = %+v, want %+v", got, tc.want)
			}
		})
	}
}
