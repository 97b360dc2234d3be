// Package fakeapi serves fake model provider APIs on loopback, for tests
// that run the real agent CLIs (claude, codex, gemini) offline: Anthropic
// Messages with SSE streaming, OpenAI Responses streaming and Gemini
// streamGenerateContent.
//
// A Server answers by the API key a request carries (see Server.Set): by
// default it works like a model that writes one file with the CLI's own
// file-writing tool and then ends its turn; it can also refuse the key (401),
// rate-limit it (429 with a reset) or accept the request and never answer.
// Every answer's token counts are added up (Server.Answered), so a test can
// compare them with what the CLI printed and what dispatch recorded.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Provider names an API dialect.
type Provider string

// The dialects a Server speaks.
const (
	Anthropic Provider = "anthropic"
	OpenAI    Provider = "openai"
	Gemini    Provider = "gemini"
)

// Behaviour is how a Server answers one API key.
type Behaviour int

const (
	// Work answers the first turn with a tool call that writes File (its
	// Content) in the CLI's working directory, and a turn that carries the
	// tool's result with a final text.
	Work Behaviour = iota
	// Unauthorized answers 401 with the provider's error body.
	Unauthorized
	// RateLimited answers 429 with the provider's error body and the reset
	// in Retry-After and the provider's own headers.
	RateLimited
	// Stall accepts the request and sends nothing until the client goes.
	Stall
)

// Usage is a sum of token counts. In counts every input token, cached ones
// included; CachedIn is the part of In read from the provider's cache.
type Usage struct {
	In, Out, CachedIn int64
}

// Turn usage the fake answers: the tool-call turn and the final turn. The
// numbers differ so that a sum or a split that goes wrong shows.
var (
	toolTurn  = Usage{In: 1200, Out: 40, CachedIn: 300}
	finalTurn = Usage{In: 1500, Out: 25, CachedIn: 0}
)

// FinalText is what the model says when its work is done.
const FinalText = "Done: the file is written."

// Request is what a Server saw of one model request.
type Request struct {
	Path  string
	Key   string
	Model string
	// Prompt is the text of the last user message (for a tool-result turn,
	// the prompt of the conversation's first user text instead).
	Prompt string
	// Tools is how many tools the request offered.
	Tools int
	// ToolResult reports whether the request carried a tool's result.
	ToolResult bool
	// ToolOutput is the text of the tool's result the request carried.
	ToolOutput string
	// Status is the HTTP status answered.
	Status int
	// Body is the request's body.
	Body string
}

// Server is a fake provider API on loopback.
type Server struct {
	URL      string
	Provider Provider
	// File and Content are what the Work behaviour's tool call writes; File
	// is relative to the CLI's working directory.
	File    string
	Content string
	// Command, when set, is what the Work behaviour's tool call runs
	// instead, with the CLI's shell tool (claude's Bash, codex's
	// exec_command, gemini's run_shell_command), in its working directory.
	Command string
	// Reset is how long after a 429 the limit resets.
	Reset time.Duration

	srv      *http.Server
	ln       net.Listener
	mu       sync.Mutex
	byKey    map[string][]Behaviour
	requests []Request
	answered Usage
	byKeyUse map[string]Usage
	stop     chan struct{}
}

// New starts a Server for provider on a loopback port; it stops when the
// test ends.
func New(t testing.TB, provider Provider) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakeapi: %v", err)
	}
	s := &Server{
		URL:      "http://" + ln.Addr().String(),
		Provider: provider,
		File:     "hello.txt",
		Content:  "written by the agent\n",
		Reset:    30 * time.Second,
		ln:       ln,
		byKey:    map[string][]Behaviour{},
		byKeyUse: map[string]Usage{},
		stop:     make(chan struct{}),
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	t.Cleanup(func() {
		close(s.stop)
		s.srv.Close()
	})
	return s
}

// Set makes the server answer key with b. Keys not set get Work.
func (s *Server) Set(key string, b Behaviour) {
	s.Script(key, b)
}

// Script makes the server answer key's model requests with bs in turn; the
// last one answers every request after.
func (s *Server) Script(key string, bs ...Behaviour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byKey[key] = bs
}

// Requests returns the model requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Answered returns the sum of the usage of every successful answer.
func (s *Server) Answered() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

// behaviour takes the next behaviour for key.
func (s *Server) behaviour(key string) Behaviour {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.byKey[key]
	if len(bs) == 0 {
		return Work
	}
	if len(bs) > 1 {
		s.byKey[key] = bs[1:]
	}
	return bs[0]
}

func (s *Server) record(r Request, u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
	s.answered = s.answered.add(u)
	s.byKeyUse[r.Key] = s.byKeyUse[r.Key].add(u)
}

func (u Usage) add(v Usage) Usage {
	return Usage{In: u.In + v.In, Out: u.Out + v.Out, CachedIn: u.CachedIn + v.CachedIn}
}

// AnsweredFor returns the sum of the usage answered to requests with key.
func (s *Server) AnsweredFor(key string) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKeyUse[key]
}

// maxBody bounds a request body; the CLIs send their whole context.
const maxBody = 64 << 20

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var c *call
	switch s.Provider {
	case Anthropic:
		c = anthropicCall(r, body)
	case OpenAI:
		c = openaiCall(r, body)
	case Gemini:
		c = geminiCall(r, body)
	}
	if c == nil {
		// Start-up probes, telemetry, model lists: not a model request.
		w.WriteHeader(http.StatusNotFound)
		return
	}
	req := Request{Path: r.URL.Path, Key: c.key, Model: c.model, Prompt: c.prompt, Tools: c.tools, ToolResult: c.toolResult, ToolOutput: c.toolOutput, Body: string(body)}
	switch s.behaviour(c.key) {
	case Unauthorized:
		req.Status = http.StatusUnauthorized
		s.record(req, Usage{})
		s.writeError(w, http.StatusUnauthorized)
	case RateLimited:
		req.Status = http.StatusTooManyRequests
		s.record(req, Usage{})
		s.writeError(w, http.StatusTooManyRequests)
	case Stall:
		req.Status = http.StatusOK
		s.record(req, Usage{})
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
	default:
		req.Status = http.StatusOK
		a := answer{text: FinalText, usage: finalTurn, model: c.model}
		switch {
		case c.json:
			a.text = sideAnswer
		case c.tools > 0 && !c.toolResult:
			a = answer{usage: toolTurn, model: c.model, write: &write{path: c.path(s.File), content: s.Content}}
			if s.Command != "" {
				a = answer{usage: toolTurn, model: c.model, run: s.Command}
			}
		}
		s.record(req, a.usage)
		switch s.Provider {
		case Anthropic:
			anthropicAnswer(w, a, c.stream)
		case OpenAI:
			openaiAnswer(w, a)
		case Gemini:
			geminiAnswer(w, a, c.stream)
		}
	}
}

// call is what the server needs of a model request.
type call struct {
	key        string
	model      string
	prompt     string
	tools      int
	toolResult bool
	toolOutput string
	stream     bool
	// json asks for a JSON text answer.
	json bool
	// cwd is the CLI's working directory as its prompt states it.
	cwd string
}

// path is where the tool call writes name: absolute under the CLI's
// working directory when the request said which it is.
func (c *call) path(name string) string {
	if c.cwd == "" {
		return name
	}
	return strings.TrimSuffix(c.cwd, "/") + "/" + name
}

type write struct{ path, content string }

// answer is one model turn: a tool call that writes a file or runs a
// shell command, or a text.
type answer struct {
	write *write
	run   string
	text  string
	usage Usage
	model string
}

// sideAnswer answers a CLI's own JSON side questions: gemini's model
// router and next-speaker check.
const sideAnswer = `{"reasoning": "a simple task", "model_choice": "flash", "next_speaker": "user"}`

// cwdRE finds the working directory the CLIs state in their prompts:
// claude's "Primary working directory: /x", codex's "<cwd>/x</cwd>" and
// gemini's "I'm currently working in the directory: /x".
var cwdRE = regexp.MustCompile(`(?:[Ww]orking directory: |<cwd>|working in the directory: )(/[^\s<"\\]+)`)

func findCwd(body []byte) string {
	m := cwdRE.FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func bearer(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return v
	}
	return ""
}

// sse writes one server-sent event and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) writeError(w http.ResponseWriter, status int) {
	secs := int(s.Reset.Round(time.Second) / time.Second)
	reset := time.Now().Add(s.Reset).UTC()
	var body any
	switch s.Provider {
	case Anthropic:
		typ, msg := "authentication_error", "invalid x-api-key"
		if status == http.StatusTooManyRequests {
			typ, msg = "rate_limit_error", "This request would exceed your organization's rate limit. Please try again later."
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			w.Header().Set("Anthropic-Ratelimit-Requests-Reset", reset.Format(time.RFC3339))
			w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "0")
		}
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	case OpenAI:
		e := map[string]any{"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key", "param": nil}
		if status == http.StatusTooManyRequests {
			// The shape of a usage limit, whose reset codex shows; an
			// API key's plain rate_limit_exceeded it retries and then
			// reports without the reset.
			e = map[string]any{"message": "The usage limit has been reached", "type": "usage_limit_reached",
				"plan_type": "plus", "resets_at": reset.Unix(), "resets_in_seconds": secs}
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			w.Header().Set("X-Ratelimit-Reset-Requests", fmt.Sprintf("%ds", secs))
			w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		}
		body = map[string]any{"error": e}
	case Gemini:
		e := map[string]any{"code": 401, "message": "API key not valid. Please pass a valid API key.", "status": "UNAUTHENTICATED"}
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			e = map[string]any{"code": 429, "status": "RESOURCE_EXHAUSTED",
				"message": fmt.Sprintf("Quota exceeded for requests per minute. Please retry in %ds.", secs),
				"details": []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fmt.Sprintf("%ds", secs)}}}
		}
		body = map[string]any{"error": e}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
