package controller

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestToolLaunchAutonomyInSandbox: the argv (and settings) of each tool by
// the attempt's sandbox and dangerous: an agent CLI runs with its own
// approval prompts off where dispatch's sandbox confines it (bwrap; under
// auto only in the wrapper's sandbox_command), claude with IS_SANDBOX=1;
// unconfined, the safe flags unless dangerous: true, as before.
func TestToolLaunchAutonomyInSandbox(t *testing.T) {
	const (
		claudeSafe = "claude -p --permission-mode acceptEdits --output-format stream-json --verbose"
		claudeAuto = "claude -p --dangerously-skip-permissions --output-format stream-json --verbose"
		codexTail  = " --json --skip-git-repo-check --disable shell_snapshot --disable plugins -c check_for_update_on_startup=false -"
		codexSafe  = "codex exec --sandbox workspace-write" + codexTail
		codexAuto  = "codex exec --dangerously-bypass-approvals-and-sandbox" + codexTail
		geminiSafe = "gemini --approval-mode auto_edit -p  --output-format stream-json --skip-trust"
		geminiAuto = "gemini --approval-mode yolo -p  --output-format stream-json --skip-trust"
		shell      = "/bin/sh {spec}"
		custom     = "my-agent --prompt-file {spec}"
	)
	cases := []struct {
		tool      string
		sandbox   string // launch.json's: "", bwrap, auto
		dangerous bool
		// command, and under auto the sandbox_command ("" none)
		command, sbCommand string
		// isSandbox: IS_SANDBOX=1 in env (bwrap) or sandbox_env (auto)
		isSandbox bool
	}{
		{"claude", "", false, claudeSafe, "", false},
		{"claude", "", true, claudeAuto, "", false},
		{"claude", wire.SandboxBwrap, false, claudeAuto, "", true},
		{"claude", wire.SandboxBwrap, true, claudeAuto, "", true},
		{"claude", wire.SandboxAuto, false, claudeSafe, claudeAuto, true},
		{"claude", wire.SandboxAuto, true, claudeAuto, "", true},
		{"codex", "", false, codexSafe, "", false},
		{"codex", "", true, codexAuto, "", false},
		{"codex", wire.SandboxBwrap, false, codexAuto, "", false},
		{"codex", wire.SandboxBwrap, true, codexAuto, "", false},
		{"codex", wire.SandboxAuto, false, codexSafe, codexAuto, false},
		{"codex", wire.SandboxAuto, true, codexAuto, "", false},
		{"gemini", "", false, geminiSafe, "", false},
		{"gemini", "", true, geminiAuto, "", false},
		{"gemini", wire.SandboxBwrap, false, geminiAuto, "", false},
		{"gemini", wire.SandboxBwrap, true, geminiAuto, "", false},
		{"gemini", wire.SandboxAuto, false, geminiSafe, geminiAuto, false},
		{"gemini", wire.SandboxAuto, true, geminiAuto, "", false},
		{"shell", wire.SandboxBwrap, false, shell, "", false},
		{"shell", wire.SandboxAuto, true, shell, "", false},
		{"mytool", wire.SandboxBwrap, false, custom, "", false},
		{"mytool", wire.SandboxAuto, false, custom, "", false},
	}
	cfg := &nodes.Config{Tools: map[string]nodes.Tool{"mytool": {Command: []string{"my-agent", "--prompt-file", "{spec}"}}}}
	for _, tc := range cases {
		var l wire.Launch
		if err := toolLaunch(cfg, tc.tool, "", tc.dangerous, tc.sandbox, "", &l); err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		name := tc.tool + " sandbox=" + tc.sandbox
		if tc.dangerous {
			name += " dangerous"
		}
		if got := strings.Join(l.Command, " "); got != tc.command {
			t.Errorf("%s: command %q, want %q", name, got, tc.command)
		}
		if got := strings.Join(l.SandboxCommand, " "); got != tc.sbCommand {
			t.Errorf("%s: sandbox_command %q, want %q", name, got, tc.sbCommand)
		}
		// Where the tool runs: under bwrap, the env with sandbox_env over it.
		confined := map[string]string{}
		for k, v := range l.Env {
			confined[k] = v
		}
		for k, v := range l.SandboxEnv {
			confined[k] = v
		}
		switch {
		case tc.sandbox == "" && l.Env["IS_SANDBOX"] != "":
			t.Errorf("%s: IS_SANDBOX set unconfined", name)
		case tc.sandbox == wire.SandboxAuto && l.Env["IS_SANDBOX"] != "":
			t.Errorf("%s: IS_SANDBOX set for the unconfined command of auto", name)
		case tc.sandbox != "" && (confined["IS_SANDBOX"] == "1") != tc.isSandbox:
			t.Errorf("%s: IS_SANDBOX under bwrap = %q, want set: %v", name, confined["IS_SANDBOX"], tc.isSandbox)
		}
	}
	// A resumed session under bwrap keeps the autonomy.
	var l wire.Launch
	if err := toolLaunch(cfg, "claude", "", false, wire.SandboxBwrap, "s-1", &l); err != nil || l.Stdin != "resume" ||
		strings.Join(l.Command, " ") != "claude -p --resume s-1 --dangerously-skip-permissions --output-format stream-json --verbose" {
		t.Errorf("resumed claude under bwrap: %q stdin %q (%v)", l.Command, l.Stdin, err)
	}
}
