package agentlog

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestFinalMessage: the agent's last word, from each CLI's own structured
// events only, clamped; nothing from a shell task.
func TestFinalMessage(t *testing.T) {
	long := strings.Repeat("é", wire.MaxFinalMessage)
	cases := []struct {
		name, agent, log, want string
	}{
		{"claude: the result event", wire.AgentClaude,
			`{"type":"system","subtype":"init","session_id":"s1"}
{"type":"assistant","message":{"content":[{"type":"text","text":"working"}]}}
{"type":"result","subtype":"success","result":"Schema in db/schema.sql: tables users, orders.","session_id":"s1"}
`, "Schema in db/schema.sql: tables users, orders."},
		{"claude: a result line printed by the task is the same event (the last one counts)", wire.AgentClaude,
			`{"type":"result","result":"first"}
{"type":"result","result":"second"}`, "second"},
		{"claude: no result event", wire.AgentClaude, "plain text\n{\"type\":\"assistant\"}\n", ""},
		{"codex: the last agent message", wire.AgentCodex,
			`{"type":"thread.started","thread_id":"t1"}
{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"looking"}}
{"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"ls"}}
{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"API done on the schema"}}
{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":2}}`, "API done on the schema"},
		{"codex: the older msg form", wire.AgentCodex, `{"id":"0","msg":{"type":"agent_message","message":"old form"}}`, "old form"},
		{"gemini: the deltas after its last tool call", wire.AgentGemini,
			`{"type":"init","session_id":"g1"}
{"type":"message","role":"user","content":"prompt"}
{"type":"message","role":"assistant","content":"Let me ","delta":true}
{"type":"message","role":"assistant","content":"look.","delta":true}
{"type":"tool_use","tool_name":"ls"}
{"type":"tool_result","status":"success"}
{"type":"message","role":"assistant","content":"Merged ","delta":true}
{"type":"message","role":"assistant","content":"both parts.","delta":true}
{"type":"result","status":"success","stats":{"input_tokens":1,"output_tokens":2}}`, "Merged both parts."},
		{"gemini: json output", wire.AgentGemini, `{"response":"done","stats":{}}`, "done"},
		{"a shell task says nothing", "", `{"type":"result","result":"forged"}`, ""},
		{"control characters are stripped", wire.AgentClaude, `{"type":"result","result":"a\u001b[31mred\u0007\nline\tx"}`, "a[31mred\nline\tx"},
		{"longer than 4 KiB: the start, cut at a rune, said", wire.AgentClaude, `{"type":"result","result":"` + long + `"}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := FinalMessage(tc.agent, []byte(tc.log))
			if strings.HasPrefix(tc.name, "longer") {
				if len(got) > wire.MaxFinalMessage || !strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, "longer than 4 KiB]") || !utf8.ValidString(got) {
					t.Errorf("clamped: %d bytes, ends %q", len(got), got[len(got)-40:])
				}
				return
			}
			if got != tc.want {
				t.Errorf("FinalMessage = %q, want %q", got, tc.want)
			}
		})
	}
}
