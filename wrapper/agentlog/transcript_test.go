package agentlog

import "testing"

// TestTranscriptDir: only claude's transcript is known by path, under its
// config directory (CLAUDE_CONFIG_DIR, else ~/.claude), named after the
// working directory with every character but letters and digits a '-'.
func TestTranscriptDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool string
		env  []string
		want string
	}{
		{"claude", []string{"HOME=/h"}, "/h/.claude/projects/-w-demo-tasks-S01-output"},
		{"claude", []string{"HOME=/h", "CLAUDE_CONFIG_DIR=/c"}, "/c/projects/-w-demo-tasks-S01-output"},
		{"claude", nil, ""},
		{"codex", []string{"HOME=/h"}, ""},
		{"gemini", []string{"HOME=/h"}, ""},
	}
	for _, tc := range tests {
		if got := TranscriptDir(tc.tool, tc.env, "/w/demo/tasks/S01/output"); got != tc.want {
			t.Errorf("TranscriptDir(%s, %q) = %q, want %q", tc.tool, tc.env, got, tc.want)
		}
	}
}
