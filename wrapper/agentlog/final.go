package agentlog

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
)

// finalMarkers are what a line must hold to be one of the events
// FinalMessage reads: the others are not decoded.
var finalMarkers = [][]byte{[]byte(`"result"`), []byte(`"agent_message"`), []byte(`"assistant"`),
	[]byte(`"response"`), []byte(`"tool_use"`), []byte(`"tool_result"`), []byte(`"user"`)}

// FinalMessage is what the agent CLI agent reported as its last word in
// logTail (task.log's end), clamped (wire.ClampMessage): claude's result
// event (stream-json), codex's last agent_message (--json: item.completed,
// or the older msg form), gemini's last assistant reply (stream-json: the
// message deltas after its last tool call, or the response of its json
// output). "" when it reported none, and always for a tool that is no
// agent CLI: a shell task's output is not a message.
func FinalMessage(agent string, logTail []byte) string {
	if !wire.IsAgent(agent) {
		return ""
	}
	var last string
	var reply strings.Builder // gemini's reply being streamed
	replying := false
	for line := range bytes.Lines(logTail) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' || !hasAny(line, finalMarkers) {
			continue
		}
		var ev finalEvent
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch agent {
		case wire.AgentClaude:
			if ev.Type == "result" && ev.Result != "" {
				last = ev.Result
			}
		case wire.AgentCodex:
			switch {
			case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
				last = ev.Item.Text
			case ev.Msg.Type == "agent_message":
				last = ev.Msg.Message
			}
		case wire.AgentGemini:
			switch {
			case ev.Type == "message" && ev.Role == "assistant":
				if !replying {
					reply.Reset()
					replying = true
				}
				reply.WriteString(ev.Content)
				last = reply.String()
			case ev.Type == "tool_use" || ev.Type == "tool_result" || (ev.Type == "message" && ev.Role == "user"):
				replying = false
			case ev.Type == "" && ev.Response != "":
				last = ev.Response
			}
		}
	}
	return wire.ClampMessage(last)
}

// finalEvent holds the fields of the events FinalMessage reads.
type finalEvent struct {
	Type     string `json:"type"`
	Result   string `json:"result"`
	Role     string `json:"role"`
	Content  string `json:"content"`
	Response string `json:"response"`
	Item     struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"item"`
	Msg struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"msg"`
}

func hasAny(line []byte, markers [][]byte) bool {
	for _, m := range markers {
		if bytes.Contains(line, m) {
			return true
		}
	}
	return false
}
