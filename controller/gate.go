package controller

import (
	"context"
	"fmt"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// maxKnownGates bounds the earlier results of a gate command a launch
// carries: the trees it gated most recently.
const maxKnownGates = 64

// What of a gate's output a launch carries, so that launch.json stays
// well under what the wrapper reads of it (1 MiB): the end of each known
// result's output, and of the output a retry is told (the prompt and
// DISPATCH_GATE_OUTPUT).
const (
	knownTailBytes = 4 << 10
	retryTailBytes = 16 << 10
)

// gateLaunch is the gate of t's attempt (project.yaml's gate: the task
// gate for an author task, deciding; the project gate for S99 and the fix
// rounds, reported for the phase machine), nil for none, with the results
// the command had on trees it gated before. A retry of an attempt its
// gate failed is told why: the output in DISPATCH_GATE_OUTPUT, and the
// spec of any tool but the shell (whose spec is the script) the command
// and the end of its output under a heading of its own.
func (c *Controller) gateLaunch(ctx context.Context, t domain.Task, tool string, opts domain.ProjectOptions, spec []byte, l *wire.Launch) (*wire.LaunchGate, []byte, error) {
	command := opts.GateFor(t.ID)
	if command == "" {
		return nil, spec, nil
	}
	g := &wire.LaunchGate{Command: command, TimeoutSeconds: opts.Gate.Timeout.Seconds(), Decides: opts.GateDecides(t.ID)}
	known, err := c.st.GateKnown(ctx, t.Project, command, maxKnownGates)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range known {
		g.Known = append(g.Known, wire.GateResult{Tree: k.Tree, Passed: k.Passed, ExitCode: k.ExitCode, Seconds: k.Seconds,
			OutputTail: wire.LastBytes(k.OutputTail, knownTailBytes), Error: wire.LastBytes(k.Error, 512), Missing: k.Missing})
	}
	if !g.Decides || t.Attempt <= 1 {
		return g, spec, nil
	}
	prev, ok, err := c.st.GateRunOf(ctx, t.Project, t.ID, t.Attempt-1)
	if err != nil || !ok || prev.Passed {
		return g, spec, err
	}
	if l.Env == nil {
		l.Env = map[string]string{}
	}
	// No process starts with a NUL in its environment.
	prev.OutputTail = wire.LastBytes(strings.ReplaceAll(prev.OutputTail, "\x00", ""), retryTailBytes)
	l.Env["DISPATCH_GATE_OUTPUT"] = prev.OutputTail
	if tool == policy.ToolShell {
		return g, spec, nil
	}
	return g, append(spec, gateNote(prev)...), nil
}

// gateNote is what a retry's spec is told of the gate its last attempt
// failed.
func gateNote(g store.GateRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n## The gate failed on your last attempt — fix this first\n\n")
	fmt.Fprintf(&b, "dispatch ran `%s` on the result of attempt %d and it did not pass (%s). ", g.Command, g.Attempt, gateWhy(g))
	b.WriteString("Your work counts only when this command passes on your result. The end of its output:\n\n")
	fence := "```"
	for strings.Contains(g.OutputTail, fence) {
		fence += "`"
	}
	fmt.Fprintf(&b, "%s\n%s\n%s\n", fence, strings.TrimRight(g.OutputTail, "\n"), fence)
	return b.String()
}

func gateWhy(g store.GateRun) string {
	if g.Error != "" {
		return g.Error
	}
	return fmt.Sprintf("exit status %d", g.ExitCode)
}

// gateRun is the row of an attempt's gate result; tool is the one the
// attempt ran.
func gateRun(t *domain.Task, tool, command string, g *wire.GateResult) store.GateRun {
	return store.GateRun{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Command: command, Tool: tool, Model: t.Model, Tree: g.Tree, Passed: g.Passed,
		ExitCode: g.ExitCode, Seconds: g.Seconds, OutputTail: g.OutputTail, Error: g.Error, Missing: g.Missing, Reused: g.Reused}
}
