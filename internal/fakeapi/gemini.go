package fakeapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// geminiCall reads a generateContent or streamGenerateContent request
// (POST /v1beta/models/<model>:streamGenerateContent?alt=sse).
func geminiCall(r *http.Request, body []byte) *call {
	path := r.URL.Path
	i := strings.LastIndexByte(path, ':')
	if r.Method != http.MethodPost || i < 0 {
		return nil
	}
	method := path[i+1:]
	if method != "generateContent" && method != "streamGenerateContent" {
		return nil
	}
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text             string          `json:"text"`
				FunctionResponse json.RawMessage `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
		Tools []struct {
			FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	model := path[strings.LastIndexByte(path[:i], '/')+1 : i]
	c := &call{key: r.Header.Get("X-Goog-Api-Key"), model: model, stream: method == "streamGenerateContent", cwd: findCwd(body)}
	if c.key == "" {
		c.key = r.URL.Query().Get("key")
	}
	// gemini's own side questions (which model routes the prompt, who
	// speaks next) want JSON and offer no tools.
	c.json = req.GenerationConfig.ResponseMimeType == "application/json"
	for _, t := range req.Tools {
		c.tools += len(t.FunctionDeclarations)
	}
	for _, m := range req.Contents {
		for _, p := range m.Parts {
			if len(p.FunctionResponse) > 0 {
				c.toolResult = true
				c.toolOutput += string(p.FunctionResponse)
			} else if m.Role == "user" && p.Text != "" && !c.toolResult {
				c.prompt = p.Text
			}
		}
	}
	return c
}

// geminiAnswer answers with gemini-cli's write_file tool or a text.
func geminiAnswer(w http.ResponseWriter, a answer, stream bool) {
	u := a.usage
	var part map[string]any
	switch {
	case a.write != nil:
		part = map[string]any{"functionCall": map[string]any{"name": "write_file",
			"args": map[string]any{"file_path": a.write.path, "content": a.write.content}}}
	case a.run != "":
		part = map[string]any{"functionCall": map[string]any{"name": "run_shell_command",
			"args": map[string]any{"command": a.run, "description": "Run the command"}}}
	default:
		part = map[string]any{"text": a.text}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}},
			"finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": u.In, "candidatesTokenCount": u.Out,
			"cachedContentTokenCount": u.CachedIn, "totalTokenCount": u.In + u.Out},
		"modelVersion": a.model,
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	sse(w, "", resp)
}
