package fakeapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// openaiCall reads a Responses request (POST /v1/responses).
func openaiCall(r *http.Request, body []byte) *call {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		return nil
	}
	var req struct {
		Model  string            `json:"model"`
		Stream bool              `json:"stream"`
		Tools  []json.RawMessage `json:"tools"`
		Input  []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Output  json.RawMessage `json:"output"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	c := &call{key: bearer(r), model: req.Model, tools: len(req.Tools), stream: req.Stream, cwd: findCwd(body)}
	for _, it := range req.Input {
		switch it.Type {
		case "function_call_output", "custom_tool_call_output":
			c.toolResult = true
			c.toolOutput += blockText(it.Output)
		case "message", "":
			if it.Role != "user" {
				continue
			}
			// codex sends its <environment_context> as a user message of
			// its own before the prompt.
			for _, p := range it.Content {
				if p.Type == "input_text" && !strings.HasPrefix(p.Text, "<") && !c.toolResult {
					c.prompt = p.Text
				}
			}
		}
	}
	return c
}

// openaiAnswer streams a response: the file is written with codex's shell
// tool, exec_command.
func openaiAnswer(w http.ResponseWriter, a answer) {
	u := a.usage
	var item map[string]any
	if a.write != nil || a.run != "" {
		cmd := a.run
		if a.write != nil {
			cmd = "printf '%s' " + shellQuote(a.write.content) + " > " + shellQuote(a.write.path)
		}
		args, _ := json.Marshal(map[string]any{"cmd": cmd})
		item = map[string]any{"type": "function_call", "id": "fc_fake_1", "call_id": "call_fake_1",
			"name": "exec_command", "arguments": string(args), "status": "completed"}
	} else {
		item = map[string]any{"type": "message", "id": "msg_fake_1", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": a.text, "annotations": []any{}}}}
	}
	resp := map[string]any{"id": "resp_fake", "object": "response", "status": "in_progress", "model": a.model, "output": []any{}}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	sse(w, "response.created", map[string]any{"type": "response.created", "response": resp})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	done := map[string]any{"id": "resp_fake", "object": "response", "status": "completed", "model": a.model,
		"output": []any{item},
		"usage": map[string]any{"input_tokens": u.In, "input_tokens_details": map[string]any{"cached_tokens": u.CachedIn},
			"output_tokens": u.Out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": u.In + u.Out}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": done})
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
