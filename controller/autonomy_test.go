package controller

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wrapper"
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
		{"claude", wrapper.SandboxBwrap, false, claudeAuto, "", true},
		{"claude", wrapper.SandboxBwrap, true, claudeAuto, "", true},
		{"claude", wrapper.SandboxAuto, false, claudeSafe, claudeAuto, true},
		{"claude", wrapper.SandboxAuto, true, claudeAuto, "", true},
		{"codex", "", false, codexSafe, "", false},
		{"codex", "", true, codexAuto, "", false},
		{"codex", wrapper.SandboxBwrap, false, codexAuto, "", false},
		{"codex", wrapper.SandboxBwrap, true, codexAuto, "", false},
		{"codex", wrapper.SandboxAuto, false, codexSafe, codexAuto, false},
		{"codex", wrapper.SandboxAuto, true, codexAuto, "", false},
		{"gemini", "", false, geminiSafe, "", false},
		{"gemini", "", true, geminiAuto, "", false},
		{"gemini", wrapper.SandboxBwrap, false, geminiAuto, "", false},
		{"gemini", wrapper.SandboxBwrap, true, geminiAuto, "", false},
		{"gemini", wrapper.SandboxAuto, false, geminiSafe, geminiAuto, false},
		{"gemini", wrapper.SandboxAuto, true, geminiAuto, "", false},
		{"shell", wrapper.SandboxBwrap, false, shell, "", false},
		{"shell", wrapper.SandboxAuto, true, shell, "", false},
		{"mytool", wrapper.SandboxBwrap, false, custom, "", false},
		{"mytool", wrapper.SandboxAuto, false, custom, "", false},
	}
	cfg := &nodes.Config{Tools: map[string]nodes.Tool{"mytool": {Command: []string{"my-agent", "--prompt-file", "{spec}"}}}}
	for _, tc := range cases {
		var l wrapper.Launch
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
		case tc.sandbox == wrapper.SandboxAuto && l.Env["IS_SANDBOX"] != "":
			t.Errorf("%s: IS_SANDBOX set for the unconfined command of auto", name)
		case tc.sandbox != "" && (confined["IS_SANDBOX"] == "1") != tc.isSandbox:
			t.Errorf("%s: IS_SANDBOX under bwrap = %q, want set: %v", name, confined["IS_SANDBOX"], tc.isSandbox)
		}
	}
	// A resumed session under bwrap keeps the autonomy.
	var l wrapper.Launch
	if err := toolLaunch(cfg, "claude", "", false, wrapper.SandboxBwrap, "s-1", &l); err != nil || l.Stdin != "resume" ||
		strings.Join(l.Command, " ") != "claude -p --resume s-1 --dangerously-skip-permissions --output-format stream-json --verbose" {
		t.Errorf("resumed claude under bwrap: %q stdin %q (%v)", l.Command, l.Stdin, err)
	}
}
