package fakeapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// anthropicCall reads a Messages request (POST /v1/messages).
func anthropicCall(r *http.Request, body []byte) *call {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		return nil
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Tools    []json.RawMessage
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	c := &call{key: r.Header.Get("X-Api-Key"), model: req.Model, tools: len(req.Tools), stream: req.Stream, cwd: findCwd(body)}
	if c.key == "" {
		c.key = bearer(r)
	}
	for _, m := range req.Messages {
		var blocks []struct {
			Type    string          `json:"type"`
			Text    string          `json:"text"`
			Content json.RawMessage `json:"content"`
		}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			c.prompt = firstText(c.prompt, m.Role, text)
			continue
		}
		json.Unmarshal(m.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "tool_result" {
				c.toolResult = true
				c.toolOutput += blockText(b.Content)
			}
		}
		if c.prompt == "" && m.Role == "user" {
			// The prompt is the last text of the first user message;
			// claude puts its <system-reminder> blocks before it.
			for _, b := range blocks {
				if b.Type == "text" && !strings.HasPrefix(b.Text, "<system-reminder>") {
					text = b.Text
				}
			}
			c.prompt = text
		}
	}
	return c
}

// blockText is the text of a tool_result's content: a string or text
// blocks.
func blockText(raw json.RawMessage) string {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// firstText keeps the prompt found so far, else takes text from a user
// message.
func firstText(prompt, role, text string) string {
	if prompt != "" || role != "user" {
		return prompt
	}
	return text
}

func anthropicAnswer(w http.ResponseWriter, a answer, stream bool) {
	u := a.usage
	uncached := u.In - u.CachedIn
	usage := map[string]any{"input_tokens": uncached, "output_tokens": u.Out,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": u.CachedIn}
	stop := "end_turn"
	var block map[string]any
	switch {
	case a.write != nil:
		stop = "tool_use"
		block = map[string]any{"type": "tool_use", "id": "toolu_fake_1", "name": "Write",
			"input": map[string]any{"file_path": a.write.path, "content": a.write.content}}
	case a.run != "":
		stop = "tool_use"
		block = map[string]any{"type": "tool_use", "id": "toolu_fake_1", "name": "Bash",
			"input": map[string]any{"command": a.run, "description": "Run the command"}}
	default:
		block = map[string]any{"type": "text", "text": a.text}
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
			"model": a.model, "content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": a.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": uncached, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": u.CachedIn}}})
	if stop == "tool_use" {
		input, _ := json.Marshal(block["input"])
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_fake_1", "name": block["name"], "input": map[string]any{}}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": a.text}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": u.Out}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}
