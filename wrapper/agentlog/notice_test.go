package agentlog

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func TestRetryNotice(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 13, 0, 0, 0, time.UTC)
	// The lines are what the real CLIs printed against the fake provider
	// APIs (internal/fakeapi): claude 2.1.330, codex 0.169.0, gemini 0.61.0.
	tests := []struct {
		agent      string
		name       string
		prev, line string
		want       Notice
		ok, stops  bool
	}{
		{wire.AgentClaude, "claude 429", "", `{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":22285,"error_status":429,"error":"rate_limit","session_id":"c2404489"}`,
			Notice{wire.ClassRateLimit, 22285 * time.Millisecond}, true, true},
		{wire.AgentClaude, "claude short 429", "", `{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":1200,"error_status":429,"error":"rate_limit"}`,
			Notice{wire.ClassRateLimit, 1200 * time.Millisecond}, true, false},
		{wire.AgentClaude, "claude 401", "", `{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":576,"error_status":401,"error":"authentication_failed"}`,
			Notice{wire.ClassAuth, 0}, true, true},
		{wire.AgentClaude, "claude overloaded", "", `{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":90000,"error_status":529,"error":"overloaded"}`,
			Notice{}, false, false},
		{wire.AgentClaude, "claude other event", "", `{"type":"system","subtype":"init","note":"api_retry"}`, Notice{}, false, false},
		{wire.AgentClaude, "claude broken json", "", `{"type":"system","subtype":"api_retry",`, Notice{}, false, false},
		{wire.AgentGemini, "gemini quota", "Attempt 1 failed: Quota exceeded for requests per minute. Please retry in 20s.", "Suggested retry after 20s.. Retrying after 20023ms...",
			Notice{wire.ClassRateLimit, 20 * time.Second}, true, true},
		{wire.AgentGemini, "gemini server error", "Attempt 1 failed with status 503. Retrying with backoff...", "Retrying after 2000ms...", Notice{}, false, false},
		{wire.AgentCodex, "codex 429", "", `{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}`,
			Notice{wire.ClassRateLimit, 0}, true, false},
		{wire.AgentCodex, "codex 401", "", `{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided., url: http://127.0.0.1:45645/v1/responses)"}`,
			Notice{wire.ClassAuth, 0}, true, true},
		{wire.AgentCodex, "codex network", "", `{"type":"error","message":"Reconnecting... 2/5 (stream disconnected before completion: failed to lookup address information: Name does not resolve)"}`,
			Notice{}, false, false},
		{wire.AgentClaude, "a task printing 429 is no notice", "", "test 429 passed", Notice{}, false, false},
		{"", "a shell printing claude's api_retry", "", `{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":86400000,"error_status":429,"error":"rate_limit"}`,
			Notice{}, false, false},
		{"", "a shell printing gemini's retry", "Attempt 1 failed: Quota exceeded. Please retry in 20h.", "Retrying after 72000000ms...", Notice{}, false, false},
		{wire.AgentCodex, "codex printing claude's api_retry", "", `{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":86400000,"error_status":429,"error":"rate_limit"}`,
			Notice{}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RetryNotice(tt.agent, []byte(tt.prev), []byte(tt.line), now)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("retryNotice = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
			if got.Stops() != tt.stops {
				t.Errorf("stops = %v, want %v", got.Stops(), tt.stops)
			}
		})
	}
}

func TestSessionID(t *testing.T) {
	t.Parallel()
	tests := []struct{ line, want string }{
		// What the real CLIs printed first (shortened).
		{`{"type":"system","subtype":"init","cwd":"/tmp/ex/ws","session_id":"c17ba855-4e3b-4e89-9ca7-aa7bcc3964be","tools":["Task"]}`, "c17ba855-4e3b-4e89-9ca7-aa7bcc3964be"},
		{`{"type":"thread.started","thread_id":"01a20476-4b89-7e82-9883-6b7b9cbab1b2"}`, "01a20476-4b89-7e82-9883-6b7b9cbab1b2"},
		{`{"type":"init","timestamp":"2026-11-22T18:20:51.063Z","session_id":"d6957361-bf23-426c-8fd1-e60450d1069e","model":"auto"}`, "d6957361-bf23-426c-8fd1-e60450d1069e"},
		{`{"type":"result","session_id":"c17ba855"}`, ""},
		{`{"type":"system","subtype":"init","session_id":"--dangerously-skip-permissions"}`, ""},
		{`{"type":"system","subtype":"init","session_id":"a b"}`, ""},
		{`init thread.started "type"`, ""},
	}
	for _, tt := range tests {
		if got := SessionID([]byte(tt.line)); got != tt.want {
			t.Errorf("sessionID(%s) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

// BenchmarkLineWatcher measures what reading every line of a tool's output
// costs the supervisor: stream-json lines of 300 bytes, 64 KiB writes.
func BenchmarkLineWatcher(b *testing.B) {
	line := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 220) + `"}]},"session_id":"c17ba855"}` + "\n"
	chunk := []byte(strings.Repeat(line, (64<<10)/len(line)))
	now := time.Now()
	w := &taskfiles.LineWatcher{On: func(prev, l []byte) {
		SessionID(l)
		RetryNotice(wire.AgentGemini, prev, l, now)
	}}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		w.Write(chunk)
	}
}
