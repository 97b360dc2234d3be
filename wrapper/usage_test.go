package wrapper

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"

	"github.com/dispatch-tool/dispatch/wire"
)

// Samples of what the tools print, shortened but with their real shapes.
const (
	claudeInit      = `{"type":"system","subtype":"init","cwd":"/w/demo/tasks/S01/output","session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10","tools":["Task","Bash","Glob","Grep","Read","Edit","Write"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"acceptEdits","apiKeySource":"ANTHROPIC_API_KEY"}`
	claudeAssistant = `{"type":"assistant","message":{"id":"msg_01XyZ","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll create hello.txt."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":5127,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10"}`
	claudeToolUser  = `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"File created successfully at: hello.txt"}]},"parent_tool_use_id":null,"session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10"}`
	claudeResult    = `{"type":"result","subtype":"success","is_error":false,"duration_ms":1234,"duration_api_ms":1100,"num_turns":3,"result":"Created hello.txt.","session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10","total_cost_usd":0.0123,"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":50,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[]}`
	claudeOldResult = `{"type":"result","subtype":"success","cost_usd":0.5,"is_error":false,"duration_ms":9000,"duration_api_ms":8000,"num_turns":7,"result":"ok","session_id":"abc","usage":{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":4000,"output_tokens":700}}`
	claudeMaxTurns  = `{"type":"result","subtype":"error_max_turns","is_error":true,"duration_ms":50000,"num_turns":31,"session_id":"abc","total_cost_usd":1.25,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":4000}}`

	codexPlainNew = `OpenAI Codex v0.46.0 (research preview)
--------
workdir: /w/demo/tasks/S02/output
model: gpt-5-codex
provider: openai
approval: never
sandbox: workspace-write [workdir, /tmp, $TMPDIR]
reasoning effort: medium
reasoning summaries: auto
session id: 0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b
--------
user
Create hello.txt containing hello.

thinking
**Creating the file**
exec
bash -lc 'echo hello > hello.txt' in /w/demo/tasks/S02/output
 succeeded in 12ms:

codex
Created hello.txt.
tokens used
12,345
Created hello.txt.
`
	codexPlainOld = `[2025-08-05T10:00:00] OpenAI Codex v0.10.0 (research preview)
--------
workdir: /w/demo/tasks/S02/output
model: codex-mini-latest
--------
[2025-08-05T10:00:01] User instructions:
Create hello.txt.
[2025-08-05T10:00:09] codex

Created hello.txt.
[2025-08-05T10:00:09] tokens used: 1234
`
	codexTokenCountInfo = `{"id":"0","msg":{"type":"task_started","model_context_window":272000}}
{"id":"0","msg":{"type":"agent_message","message":"Created hello.txt."}}
{"id":"0","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":2000,"cached_input_tokens":1500,"output_tokens":300,"reasoning_output_tokens":200,"total_tokens":2300},"last_token_usage":{"input_tokens":700,"cached_input_tokens":600,"output_tokens":90,"reasoning_output_tokens":40,"total_tokens":790},"model_context_window":272000}}}
{"id":"0","msg":{"type":"task_complete","last_agent_message":"Created hello.txt."}}
`
	codexTokenCountFlat = `{"type":"agent_message","message":"done"}
{"type":"token_count","input_tokens":900,"cached_input_tokens":0,"output_tokens":80,"reasoning_output_tokens":0,"total_tokens":980}
`
	codexTurnCompleted = `{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Creating the file**"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'echo hello > hello.txt'","aggregated_output":"","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Created hello.txt."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
`
	geminiJSON = `Loaded cached credentials.
{
  "response": "Created hello.txt.",
  "stats": {
    "models": {
      "gemini-2.5-pro": {
        "api": {
          "totalRequests": 2,
          "totalErrors": 0,
          "totalLatencyMs": 5053
        },
        "tokens": {
          "prompt": 24939,
          "candidates": 20,
          "total": 25113,
          "cached": 21263,
          "thoughts": 154,
          "tool": 0
        }
      },
      "gemini-2.5-flash": {
        "api": {
          "totalRequests": 1,
          "totalErrors": 0,
          "totalLatencyMs": 1200
        },
        "tokens": {
          "prompt": 1000,
          "candidates": 5,
          "total": 1005,
          "cached": 0,
          "thoughts": 0,
          "tool": 0
        }
      }
    },
    "tools": {
      "totalCalls": 1,
      "totalSuccess": 1,
      "totalFail": 0,
      "totalDurationMs": 1881,
      "byName": {
        "write_file": {
          "count": 1,
          "success": 1,
          "fail": 0,
          "durationMs": 1881
        }
      }
    },
    "files": {
      "totalLinesAdded": 1,
      "totalLinesRemoved": 0
    }
  }
}
`
	geminiStream = `{"type":"init","timestamp":"2025-10-10T12:00:00.000Z","session_id":"abc","model":"gemini-2.5-pro"}
{"type":"message","timestamp":"2025-10-10T12:00:01.000Z","role":"assistant","content":"Created hello.txt.","delta":true}
{"type":"result","timestamp":"2025-10-10T12:00:02.000Z","status":"success","stats":{"total_tokens":3000,"input_tokens":2800,"output_tokens":200,"duration_ms":2000,"tool_calls":1}}
`
	geminiPlain = `Loaded cached credentials.
I created hello.txt with the content "hello".
`
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	const fillLine = "some output of a long run, padded to a line\n"
	filler := strings.Repeat(fillLine, usageTail/len(fillLine)+1000)
	tests := []struct {
		agent   string
		name    string
		log     string
		in, out int64
		cost    float64
	}{
		{wire.AgentClaude, "claude stream-json", lines(claudeInit, claudeAssistant, claudeToolUser, claudeAssistant, claudeResult), 150, 50, 0.0123},
		{wire.AgentClaude, "claude old cost_usd", lines(claudeInit, claudeAssistant, claudeOldResult), 5000, 700, 0.5},
		{wire.AgentClaude, "claude last result wins", lines(claudeOldResult, claudeInit, claudeResult), 150, 50, 0.0123},
		{wire.AgentClaude, "claude error result", lines(claudeInit, claudeAssistant, claudeMaxTurns), 3210, 4000, 1.25},
		{wire.AgentClaude, "claude result then stderr", lines(claudeResult, "Error: something after the result"), 150, 50, 0.0123},
		{wire.AgentClaude, "claude result with CRLF", strings.ReplaceAll(lines(claudeInit, claudeResult), "\n", "\r\n"), 150, 50, 0.0123},
		{wire.AgentClaude, "claude killed before its result", lines(claudeInit, claudeAssistant, claudeToolUser), 0, 0, 0},
		{wire.AgentClaude, "claude after a cut", taskfiles.CutMarker(123456) + `:5,"output_tokens":7}}` + "\n" + lines(claudeAssistant, claudeResult), 150, 50, 0.0123},
		{wire.AgentCodex, "codex plain", codexPlainNew, 0, 12345, 0},
		{wire.AgentCodex, "codex plain coloured", "codex\nDone.\n\x1b[2mtokens used\x1b[0m\n\x1b[2m9,876\x1b[0m\n", 0, 9876, 0},
		{wire.AgentCodex, "codex plain old", codexPlainOld, 0, 1234, 0},
		{wire.AgentCodex, "codex plain one line", "Done.\ntokens used: 12,345\n", 0, 12345, 0},
		{wire.AgentCodex, "codex last summary wins", "tokens used: 5\nmore\n[2025-08-05T10:00:09] tokens used: 77\n", 0, 77, 0},
		{wire.AgentCodex, "codex token_count info", codexTokenCountInfo, 2000, 300, 0},
		{wire.AgentCodex, "codex token_count flat", codexTokenCountFlat, 900, 80, 0},
		{wire.AgentCodex, "codex turn.completed", codexTurnCompleted, 24763, 122, 0},
		{wire.AgentCodex, "codex json preferred to text", codexTokenCountFlat + "tokens used\n980\n", 900, 80, 0},
		{wire.AgentCodex, "codex last token_count wins", codexTokenCountFlat + codexTokenCountInfo, 2000, 300, 0},
		{wire.AgentGemini, "gemini json", geminiJSON, 25939, 25, 0},
		{wire.AgentGemini, "gemini json then stderr", geminiJSON + "Warning: something\n", 25939, 25, 0},
		{wire.AgentGemini, "gemini json compact", `{"response":"ok","stats":{"models":{"gemini-2.5-flash":{"tokens":{"prompt":10,"candidates":3}}}}}` + "\n", 10, 3, 0},
		{wire.AgentGemini, "gemini stream-json", geminiStream, 2800, 200, 0},
		{wire.AgentGemini, "gemini plain", geminiPlain, 0, 0, 0},
		{wire.AgentClaude, "empty", "", 0, 0, 0},
		{wire.AgentClaude, "no usage", "hello\nworld\n", 0, 0, 0},
		{wire.AgentCodex, "tokens used in prose", "The lexer reported tokens used: 5 in total.\n", 0, 0, 0},
		{wire.AgentCodex, "tokens used without a number", "tokens used\nnone\n", 0, 0, 0},
		{wire.AgentClaude, "result without usage", `{"type":"result","subtype":"success","result":"x"}` + "\n", 0, 0, 0},
		{wire.AgentClaude, "usage of the wrong type", `{"type":"result","usage":"lots","total_cost_usd":"free"}` + "\n", 0, 0, 0},
		{wire.AgentClaude, "negative and fractional", `{"type":"result","total_cost_usd":-1,"usage":{"input_tokens":-5,"output_tokens":2.7}}` + "\n", 0, 2, 0},
		{wire.AgentClaude, "truncated json", claudeResult[:len(claudeResult)/2] + "\n", 0, 0, 0},
		{wire.AgentClaude, "json array", `[{"type":"result","usage":{"input_tokens":1,"output_tokens":1}}]` + "\n", 0, 0, 0},
		{wire.AgentGemini, "lone brace", "{\n\"stats\": 3\n", 0, 0, 0},
		{wire.AgentClaude, "binary", "\x00\xff{\xfe\n\x01{\"type\":\x00\n", 0, 0, 0},
		{wire.AgentClaude, "only the last 4 MiB", claudeResult + "\n" + filler, 0, 0, 0},
		{wire.AgentClaude, "result after much output", filler + claudeResult + "\n", 150, 50, 0.0123},
		// Only the agent's own report counts: a shell task, a custom tool or
		// another CLI printing claude's result is not read.
		{"", "a shell printing a claude result", lines(claudeResult), 0, 0, 0},
		{"", "a shell printing a forged cost", `{"type":"result","total_cost_usd":1e9,"usage":{"input_tokens":1,"output_tokens":1}}` + "\n", 0, 0, 0},
		{"", "a shell printing codex's summary", "tokens used: 12,345\n", 0, 0, 0},
		{wire.AgentCodex, "codex printing a claude result", lines(claudeResult), 0, 0, 0},
		{wire.AgentGemini, "gemini printing a claude result", lines(claudeResult), 0, 0, 0},
		{wire.AgentClaude, "claude printing codex's summary", "tokens used: 12,345\n", 0, 0, 0},
		{wire.AgentClaude, "claude's result before a codex line", lines(claudeResult, `{"type":"token_count","input_tokens":9,"output_tokens":4}`), 150, 50, 0.0123},
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

func lines(ls ...string) string {
	return strings.Join(ls, "\n") + "\n"
}
