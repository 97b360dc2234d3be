package executor

import (
	"fmt"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestLaunchResult: how the wrapper executor reads `wrapper run`'s result
// for one task directory.
func TestLaunchResult(t *testing.T) {
	byDir := map[string]wire.LaunchResult{
		"/w/p/tasks/S01": {Dir: "/w/p/tasks/S01", Run: &wire.RunReply{Task: "S01", Attempt: 1, PID: 7}},
		"/w/p/tasks/S02": {Dir: "/w/p/tasks/S02", Kind: wire.KindAlreadyRunning, Error: "a supervisor (pid 9) holds the directory"},
		"/w/p/tasks/S03": {Dir: "/w/p/tasks/S03", Error: "spec.md: read-only file system"},
		"/w/p/tasks/S04": {Dir: "/w/p/tasks/S04", Run: &wire.RunReply{Task: "S04", PID: 0}},
	}
	for _, tc := range []struct{ dir, want string }{
		{"/w/p/tasks/S01", "started pid 7"},
		{"/w/p/tasks/S02", "uncertain: a supervisor (pid 9) holds the directory"},
		{"/w/p/tasks/S03", "failed: wrapper run: spec.md: read-only file system"},
		{"/w/p/tasks/S04", "uncertain: wrapper run: an empty result"},
		{"/w/p/tasks/S05", "uncertain: wrapper run: no result for this task"},
	} {
		var got string
		switch l := launchResult(byDir, tc.dir); {
		case l.Run != nil && l.Err == nil && l.Uncertain == nil:
			got = fmt.Sprintf("started pid %d", l.Run.PID)
		case l.Err != nil && l.Run == nil && l.Uncertain == nil:
			got = "failed: " + l.Err.Error()
		case l.Uncertain != nil && l.Run == nil && l.Err == nil:
			got = "uncertain: " + l.Uncertain.Error()
		default:
			got = fmt.Sprintf("not one outcome: %+v", l)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.dir, got, tc.want)
		}
	}
}
