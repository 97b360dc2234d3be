package agentlogtest

import "strings"

// Samples of what the tools print, shortened but with their real shapes.
const (
	ClaudeInit      = `{"type":"system","subtype":"init","cwd":"/w/demo/tasks/S01/output","session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10","tools":["Task","Bash","Glob","Grep","Read","Edit","Write"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"acceptEdits","apiKeySource":"ANTHROPIC_API_KEY"}`
	ClaudeAssistant = `{"type":"assistant","message":{"id":"msg_01XyZ","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll create hello.txt."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":5127,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10"}`
	ClaudeToolUser  = `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"File created successfully at: hello.txt"}]},"parent_tool_use_id":null,"session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10"}`
	ClaudeResult    = `{"type":"result","subtype":"success","is_error":false,"duration_ms":1234,"duration_api_ms":1100,"num_turns":3,"result":"Created hello.txt.","session_id":"9d2c41c4-1f0e-4b7e-9d2a-3f1c2b8e7a10","total_cost_usd":0.0123,"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":50,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[]}`
	ClaudeOldResult = `{"type":"result","subtype":"success","cost_usd":0.5,"is_error":false,"duration_ms":9000,"duration_api_ms":8000,"num_turns":7,"result":"ok","session_id":"abc","usage":{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":4000,"output_tokens":700}}`
	ClaudeMaxTurns  = `{"type":"result","subtype":"error_max_turns","is_error":true,"duration_ms":50000,"num_turns":31,"session_id":"abc","total_cost_usd":1.25,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":4000}}`

	CodexPlainNew = `OpenAI Codex v0.46.0 (research preview)
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
	CodexPlainOld = `[2025-08-05T10:00:00] OpenAI Codex v0.10.0 (research preview)
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
	CodexTokenCountInfo = `{"id":"0","msg":{"type":"task_started","model_context_window":272000}}
{"id":"0","msg":{"type":"agent_message","message":"Created hello.txt."}}
{"id":"0","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":2000,"cached_input_tokens":1500,"output_tokens":300,"reasoning_output_tokens":200,"total_tokens":2300},"last_token_usage":{"input_tokens":700,"cached_input_tokens":600,"output_tokens":90,"reasoning_output_tokens":40,"total_tokens":790},"model_context_window":272000}}}
{"id":"0","msg":{"type":"task_complete","last_agent_message":"Created hello.txt."}}
`
	CodexTokenCountFlat = `{"type":"agent_message","message":"done"}
{"type":"token_count","input_tokens":900,"cached_input_tokens":0,"output_tokens":80,"reasoning_output_tokens":0,"total_tokens":980}
`
	CodexTurnCompleted = `{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Creating the file**"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'echo hello > hello.txt'","aggregated_output":"","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Created hello.txt."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
`
	GeminiJSON = `Loaded cached credentials.
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
	GeminiStream = `{"type":"init","timestamp":"2025-10-10T12:00:00.000Z","session_id":"abc","model":"gemini-2.5-pro"}
{"type":"message","timestamp":"2025-10-10T12:00:01.000Z","role":"assistant","content":"Created hello.txt.","delta":true}
{"type":"result","timestamp":"2025-10-10T12:00:02.000Z","status":"success","stats":{"total_tokens":3000,"input_tokens":2800,"output_tokens":200,"duration_ms":2000,"tool_calls":1}}
`
	GeminiPlain = `Loaded cached credentials.
I created hello.txt with the content "hello".
`
)

func Lines(ls ...string) string {
	return strings.Join(ls, "\n") + "\n"
}
