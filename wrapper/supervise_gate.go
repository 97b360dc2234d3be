package wrapper

import (
	"io"
	"os/exec"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/gate"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// runGate runs the gate (package gate) on the attempt's result: out, or
// commit for a git-native attempt.
func (s *supervisor) runGate(out, commit string) *wire.GateResult {
	return gate.Run(&gate.Attempt{Dir: s.dir, Launch: &s.launch, Sandbox: s.sandbox, Env: s.env, Log: s.tlog,
		Logger: s.logger, Stopping: s.stopping, Start: s.startLimited}, out, commit)
}

// startLimited starts cmd as the attempt's child under its limits, with
// the watchdog on it, as the attempt's current process.
func (s *supervisor) startLimited(cmd *exec.Cmd, out io.Writer) (*proc.Proc, error) {
	cmd, err := s.limited(cmd)
	if err != nil {
		return nil, err
	}
	p, err := s.startChildTo(cmd, out)
	if err != nil {
		return nil, err
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	return p, nil
}
