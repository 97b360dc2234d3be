package controller

import (
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestNoRetry: a failure that a retry would repeat (a gate command or a
// tool missing on the node, a start_permanent: issue 32) is not retried, with the reason and the same
// advice as the stop line and the report; any other is left to the retry
// policy.
func TestNoRetry(t *testing.T) {
	task := &domain.Task{Project: "p", ID: "S01", Node: "n1", MaxRetries: 2}
	tests := []struct {
		name  string
		class string
		st    wire.Status
		want  string
	}{
		{"gate command missing", wire.ClassGate, wire.Status{Gate: &wire.GateResult{Missing: true}},
			"not retried (a retry would fail the same way): the gate command `make check` was not found on node n1; install it there or fix gate: in project.yaml, then dispatch start p"},
		{"tool missing", wire.ClassExit, wire.Status{ToolMissing: true},
			"not retried (a retry would fail the same way): its tool's executable is not on node n1; install it there, then dispatch retry p S01"},
		{"a tool the sandbox cannot run", wire.ClassStartPermanent, wire.Status{Error: "start tool in the sandbox: the tool lies in /tmp/cli, under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere (e.g. /usr/local/bin, ~/.local/bin), or set sandbox: off for the task or the node"},
			"not retried (a retry would fail the same way): start tool in the sandbox: the tool lies in /tmp/cli, under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere (e.g. /usr/local/bin, ~/.local/bin), or set sandbox: off for the task or the node; once fixed, dispatch retry p S01"},
		{"a start failure another attempt may mend", wire.ClassStart, wire.Status{Error: "setup failed: exit status 1"}, ""},
		{"gate failed", wire.ClassGate, wire.Status{Gate: &wire.GateResult{ExitCode: 1}}, ""},
		{"exit", wire.ClassExit, wire.Status{ExitCode: 3}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := noRetry(task, tc.class, "make check", &tc.st); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
