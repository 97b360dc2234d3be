package wrapper

import (
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
)

// TestToolArgvEnvFollowsTheSandbox: with sandbox auto the wrapper runs
// sandbox_command, with sandbox_env over the environment, only where the
// attempt really runs under bwrap; unconfined, the command and the
// environment as built.
func TestToolArgvEnvFollowsTheSandbox(t *testing.T) {
	s := &supervisor{launch: wire.Launch{Command: []string{"claude", "--permission-mode", "acceptEdits"}, Sandbox: wire.SandboxAuto,
		SandboxCommand: []string{"claude", "--dangerously-skip-permissions"}, SandboxEnv: map[string]string{"IS_SANDBOX": "1"}},
		env: []string{"PATH=/usr/bin", "IS_SANDBOX=0"}}
	argv, env := s.toolArgvEnv()
	if strings.Join(argv, " ") != "claude --permission-mode acceptEdits" || !slices.Equal(env, s.env) {
		t.Errorf("unconfined: %q %q", argv, env)
	}
	s.sandbox = &sandbox.Spec{Bwrap: "/usr/bin/bwrap"}
	argv, env = s.toolArgvEnv()
	if strings.Join(argv, " ") != "claude --dangerously-skip-permissions" || strings.Join(env, " ") != "PATH=/usr/bin IS_SANDBOX=1" {
		t.Errorf("under bwrap: %q %q", argv, env)
	}
	s.launch.SandboxCommand, s.launch.SandboxEnv = nil, nil
	if argv, env = s.toolArgvEnv(); strings.Join(argv, " ") != "claude --permission-mode acceptEdits" || !slices.Equal(env, s.env) {
		t.Errorf("under bwrap without sandbox_command: %q %q", argv, env)
	}
}
