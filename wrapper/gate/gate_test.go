package gate

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestStepVerdict: what the gate result says of each way a step can end,
// in order of precedence: could not start, timed out, stopped, setup
// failed, command not found (missing: the node to fix), failed, passed.
func TestStepVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		end         stepEnd
		want        string
		wantMissing bool
	}{
		{"passed", stepEnd{What: "gate"}, "", false},
		{"setup passed", stepEnd{What: "setup"}, "", false},
		{"failed", stepEnd{What: "gate", Code: 1}, "exit status 1", false},
		{"killed", stepEnd{What: "gate", Code: -1, Sig: syscall.SIGKILL}, "killed by SIGKILL", false},
		{"not found", stepEnd{What: "gate", Code: 127, Node: "box1"}, "the gate command was not found (exit 127): install it on node box1 or fix gate: in project.yaml", true},
		{"setup not found is setup failing", stepEnd{What: "setup", Code: 127}, "setup failed in the gate's copy: exit status 127", false},
		{"setup failed", stepEnd{What: "setup", Code: 2}, "setup failed in the gate's copy: exit status 2", false},
		{"stopped beats its exit", stepEnd{What: "gate", Code: -1, Sig: syscall.SIGKILL, Stopping: true}, "stopped", false},
		{"timed out beats stopped", stepEnd{What: "gate", Code: -1, Sig: syscall.SIGKILL, TimedOut: true, Stopping: true, Timeout: 20 * time.Second}, "timed out after 20s", false},
		{"could not start beats all", stepEnd{What: "setup", Code: -1, Err: errors.New("no sh"), TimedOut: true}, "setup could not start: no sh", false},
	}
	for _, tc := range tests {
		got, missing := stepVerdict(tc.end)
		if got != tc.want || missing != tc.wantMissing {
			t.Errorf("%s: stepVerdict = %q, %v; want %q, %v", tc.name, got, missing, tc.want, tc.wantMissing)
		}
	}
}

// TestKnown: a tree gated before gets its result back, marked reused;
// another tree none.
func TestKnown(t *testing.T) {
	t.Parallel()
	known := []wire.GateResult{{Tree: "sha256:a", Passed: true}, {Tree: "sha256:b", Error: "exit status 1"}}
	for _, tc := range []struct {
		tree, want string
	}{{"sha256:a", "passed"}, {"sha256:b", "failed: exit status 1"}, {"sha256:c", ""}} {
		r := Known(known, tc.tree)
		switch {
		case tc.want == "" && r != nil:
			t.Errorf("Known(%s) = %+v, want none", tc.tree, r)
		case tc.want != "" && (r == nil || !r.Reused || verdict(r) != tc.want):
			t.Errorf("Known(%s) = %+v, want %s, reused", tc.tree, r, tc.want)
		}
	}
	if known[0].Reused {
		t.Error("Known marked the launch's own result")
	}
}
