package policy

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
)

func TestEveryBuiltinToolHasACommand(t *testing.T) {
	for _, name := range spec.BuiltinTools {
		argv, _, _, err := ToolCommand(&nodes.Config{}, name, "m1", true, false, "")
		if err != nil || len(argv) == 0 {
			t.Errorf("tool %s: %v, %v", name, argv, err)
		}
	}
	if len(builtinTools) != len(spec.BuiltinTools) {
		t.Errorf("controller knows %d built-in tools, spec.BuiltinTools lists %d", len(builtinTools), len(spec.BuiltinTools))
	}
}

func TestToolCommandLines(t *testing.T) {
	// session "" starts afresh; a session resumes claude and codex, while
	// gemini and the others restart.
	cases := []struct {
		tool, model string
		dangerous   bool
		session     string
		want        string
		stdin       string
	}{
		{"claude", "", false, "", "claude -p --permission-mode acceptEdits --output-format stream-json --verbose", "spec"},
		{"claude", "sonnet", true, "", "claude -p --model sonnet --dangerously-skip-permissions --output-format stream-json --verbose", "spec"},
		{"codex", "o3", false, "", "codex exec -m o3 --sandbox workspace-write --json --skip-git-repo-check --disable shell_snapshot --disable plugins -c check_for_update_on_startup=false -", "spec"},
		{"codex", "", true, "", "codex exec --dangerously-bypass-approvals-and-sandbox --json --skip-git-repo-check --disable shell_snapshot --disable plugins -c check_for_update_on_startup=false -", "spec"},
		{"gemini", "pro", false, "", "gemini -m pro --approval-mode auto_edit -p  --output-format stream-json --skip-trust", "spec"},
		{"gemini", "", true, "", "gemini --approval-mode yolo -p  --output-format stream-json --skip-trust", "spec"},
		{"shell", "ignored", true, "", "/bin/sh {spec}", ""},
		{"mytool", "x", false, "", "my-agent --prompt-file {spec} --model x", "spec"},
		{"claude", "sonnet", false, "s-1", "claude -p --resume s-1 --model sonnet --permission-mode acceptEdits --output-format stream-json --verbose", "resume"},
		{"codex", "", false, "s-1", `codex exec resume -c sandbox_mode="workspace-write" --json --skip-git-repo-check --disable shell_snapshot --disable plugins -c check_for_update_on_startup=false s-1 -`, "resume"},
		{"codex", "o3", true, "s-1", "codex exec resume -m o3 --dangerously-bypass-approvals-and-sandbox --json --skip-git-repo-check --disable shell_snapshot --disable plugins -c check_for_update_on_startup=false s-1 -", "resume"},
		{"gemini", "", false, "s-1", "gemini --approval-mode auto_edit -p  --output-format stream-json --skip-trust", "spec"},
		{"shell", "", false, "s-1", "/bin/sh {spec}", ""},
	}
	cfg := &nodes.Config{Tools: map[string]nodes.Tool{"mytool": {Command: []string{"my-agent", "--prompt-file", "{spec}"}, ModelFlag: "--model"}}}
	for _, tc := range cases {
		argv, stdin, _, err := ToolCommand(cfg, tc.tool, tc.model, tc.dangerous, false, tc.session)
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		if got := strings.Join(argv, " "); got != tc.want || stdin != tc.stdin {
			t.Errorf("%s (session %q): %q stdin %q, want %q stdin %q", tc.tool, tc.session, got, stdin, tc.want, tc.stdin)
		}
	}
	if _, _, _, err := ToolCommand(cfg, "nosuch", "", false, false, ""); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("unknown tool: %v", err)
	}
}
