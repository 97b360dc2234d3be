package agentlog

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog/agentlogtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	const fillLine = "some output of a long run, padded to a line\n"
	filler := strings.Repeat(fillLine, UsageTail/len(fillLine)+1000)
	tests := []struct {
		agent   string
		name    string
		log     string
		in, out int64
		cost    float64
	}{
		{wire.AgentClaude, "claude stream-json", agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeToolUser, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeResult), 150, 50, 0.0123},
		{wire.AgentClaude, "claude old cost_usd", agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeOldResult), 5000, 700, 0.5},
		{wire.AgentClaude, "claude last result wins", agentlogtest.Lines(agentlogtest.ClaudeOldResult, agentlogtest.ClaudeInit, agentlogtest.ClaudeResult), 150, 50, 0.0123},
		{wire.AgentClaude, "claude error result", agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeMaxTurns), 3210, 4000, 1.25},
		{wire.AgentClaude, "claude result then stderr", agentlogtest.Lines(agentlogtest.ClaudeResult, "Error: something after the result"), 150, 50, 0.0123},
		{wire.AgentClaude, "claude result with CRLF", strings.ReplaceAll(agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeResult), "\n", "\r\n"), 150, 50, 0.0123},
		{wire.AgentClaude, "claude killed before its result", agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeToolUser), 0, 0, 0},
		{wire.AgentClaude, "claude after a cut", taskfiles.CutMarker(123456) + `:5,"output_tokens":7}}` + "\n" + agentlogtest.Lines(agentlogtest.ClaudeAssistant, agentlogtest.ClaudeResult), 150, 50, 0.0123},
		{wire.AgentCodex, "codex plain", agentlogtest.CodexPlainNew, 0, 12345, 0},
		{wire.AgentCodex, "codex plain coloured", "codex\nDone.\n\x1b[2mtokens used\x1b[0m\n\x1b[2m9,876\x1b[0m\n", 0, 9876, 0},
		{wire.AgentCodex, "codex plain old", agentlogtest.CodexPlainOld, 0, 1234, 0},
		{wire.AgentCodex, "codex plain one line", "Done.\ntokens used: 12,345\n", 0, 12345, 0},
		{wire.AgentCodex, "codex last summary wins", "tokens used: 5\nmore\n[2025-08-05T10:00:09] tokens used: 77\n", 0, 77, 0},
		{wire.AgentCodex, "codex token_count info", agentlogtest.CodexTokenCountInfo, 2000, 300, 0},
		{wire.AgentCodex, "codex token_count flat", agentlogtest.CodexTokenCountFlat, 900, 80, 0},
		{wire.AgentCodex, "codex turn.completed", agentlogtest.CodexTurnCompleted, 24763, 122, 0},
		{wire.AgentCodex, "codex json preferred to text", agentlogtest.CodexTokenCountFlat + "tokens used\n980\n", 900, 80, 0},
		{wire.AgentCodex, "codex last token_count wins", agentlogtest.CodexTokenCountFlat + agentlogtest.CodexTokenCountInfo, 2000, 300, 0},
		{wire.AgentGemini, "gemini json", agentlogtest.GeminiJSON, 25939, 25, 0},
		{wire.AgentGemini, "gemini json then stderr", agentlogtest.GeminiJSON + "Warning: something\n", 25939, 25, 0},
		{wire.AgentGemini, "gemini json compact", `{"response":"ok","stats":{"models":{"gemini-2.5-flash":{"tokens":{"prompt":10,"candidates":3}}}}}` + "\n", 10, 3, 0},
		{wire.AgentGemini, "gemini stream-json", agentlogtest.GeminiStream, 2800, 200, 0},
		{wire.AgentGemini, "gemini plain", agentlogtest.GeminiPlain, 0, 0, 0},
		{wire.AgentClaude, "empty", "", 0, 0, 0},
		{wire.AgentClaude, "no usage", "hello\nworld\n", 0, 0, 0},
		{wire.AgentCodex, "tokens used in prose", "The lexer reported tokens used: 5 in total.\n", 0, 0, 0},
		{wire.AgentCodex, "tokens used without a number", "tokens used\nnone\n", 0, 0, 0},
		{wire.AgentClaude, "result without usage", `{"type":"result","subtype":"success","result":"x"}` + "\n", 0, 0, 0},
		{wire.AgentClaude, "usage of the wrong type", `{"type":"result","usage":"lots","total_cost_usd":"free"}` + "\n", 0, 0, 0},
		{wire.AgentClaude, "negative and fractional", `{"type":"result","total_cost_usd":-1,"usage":{"input_tokens":-5,"output_tokens":2.7}}` + "\n", 0, 2, 0},
		{wire.AgentClaude, "truncated json", agentlogtest.ClaudeResult[:len(agentlogtest.ClaudeResult)/2] + "\n", 0, 0, 0},
		{wire.AgentClaude, "json array", `[{"type":"result","usage":{"input_tokens":1,"output_tokens":1}}]` + "\n", 0, 0, 0},
		{wire.AgentGemini, "lone brace", "{\n\"stats\": 3\n", 0, 0, 0},
		{wire.AgentClaude, "binary", "\x00\xff{\xfe\n\x01{\"type\":\x00\n", 0, 0, 0},
		{wire.AgentClaude, "only the last 4 MiB", agentlogtest.ClaudeResult + "\n" + filler, 0, 0, 0},
		{wire.AgentClaude, "result after much output", filler + agentlogtest.ClaudeResult + "\n", 150, 50, 0.0123},
		// Only the agent's own report counts: a shell task, a custom tool or
		// another CLI printing claude's result is not read.
		{"", "a shell printing a claude result", agentlogtest.Lines(agentlogtest.ClaudeResult), 0, 0, 0},
		{"", "a shell printing a forged cost", `{"type":"result","total_cost_usd":1e9,"usage":{"input_tokens":1,"output_tokens":1}}` + "\n", 0, 0, 0},
		{"", "a shell printing codex's summary", "tokens used: 12,345\n", 0, 0, 0},
		{wire.AgentCodex, "codex printing a claude result", agentlogtest.Lines(agentlogtest.ClaudeResult), 0, 0, 0},
		{wire.AgentGemini, "gemini printing a claude result", agentlogtest.Lines(agentlogtest.ClaudeResult), 0, 0, 0},
		{wire.AgentClaude, "claude printing codex's summary", "tokens used: 12,345\n", 0, 0, 0},
		{wire.AgentClaude, "claude's result before a codex line", agentlogtest.Lines(agentlogtest.ClaudeResult, `{"type":"token_count","input_tokens":9,"output_tokens":4}`), 150, 50, 0.0123},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, out, cost := ParseUsage(tc.agent, []byte(tc.log))
			if in != tc.in || out != tc.out || cost != tc.cost {
				t.Errorf("ParseUsage = %d, %d, %g; want %d, %d, %g", in, out, cost, tc.in, tc.out, tc.cost)
			}
		})
	}
}
