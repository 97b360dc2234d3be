package agentlog

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code int
		log  string
		want string
	}{
		{"success", 0, "HTTP 429 rate limit", ""},
		{"plain failure", 1, "panic: something broke\n", wire.ClassExit},
		{"empty log", 2, "", wire.ClassExit},
		{"http 429", 1, "request failed: HTTP 429\n", wire.ClassRateLimit},
		{"rate limit words", 1, "Rate Limit reached for requests\n", wire.ClassRateLimit},
		{"rate_limit_error", 1, `{"type":"rate_limit_error"}`, wire.ClassRateLimit},
		{"overloaded", 1, `{"type":"overloaded_error","message":"Overloaded"}`, wire.ClassRateLimit},
		{"too many requests", 1, "Error: Too Many Requests", wire.ClassRateLimit},
		{"429 inside a number", 1, "processed 14290 rows\nerror: disk full\n", wire.ClassExit},
		{"401", 1, "API Error: 401 Unauthorized\n", wire.ClassAuth},
		{"403", 1, "status=403\n", wire.ClassAuth},
		{"403 inside a word", 1, "see issue #4031 and x403y\n", wire.ClassExit},
		{"invalid api key", 1, "Invalid API Key · Please run /login\n", wire.ClassAuth},
		{"authentication_error", 1, `{"error":{"type":"authentication_error"}}`, wire.ClassAuth},
		{"last message wins: auth", 1, "429 too many requests\nretrying\n401 unauthorized\n", wire.ClassAuth},
		{"last message wins: rate limit", 1, "401 unauthorized\nrefreshed token\nHTTP 429\n", wire.ClassRateLimit},
		{"a time that reads 401", 1, "HTTP 429\n{\"type\":\"result\",\"duration_ms\":401,\"duration_api_ms\": 403}\n", wire.ClassRateLimit},
		{"a cost that reads 401", 1, "429 too many requests\ntotal_cost_usd=1.401 took: 403\n", wire.ClassRateLimit},
		{"json status code", 1, `{"status":401,"duration_ms":429.5}`, wire.ClassAuth},
		{"api error field", 1, "rate limited earlier\napi_error_code: 403\n", wire.ClassAuth},
		{"only the tail counts", 1, "HTTP 429\n" + strings.Repeat("x", taskfiles.ClassifyTail) + "\nexit\n", wire.ClassExit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.code, []byte(tc.log)); got != tc.want {
				t.Errorf("Classify(%d, %.40q) = %q, want %q", tc.code, tc.log, got, tc.want)
			}
		})
	}
}

func TestExitClassShellIsExit(t *testing.T) {
	lie := []byte("API Error: 429 rate limit exceeded. Please retry after 86400 seconds\n")
	for _, tc := range []struct {
		agent string
		code  int
		want  string
	}{
		{"", 1, wire.ClassExit},
		{"", 0, ""},
		{"claude", 1, wire.ClassRateLimit},
	} {
		if got := ExitClass(tc.agent, tc.code, lie); got != tc.want {
			t.Errorf("exitClass(%q, %d) = %q, want %q", tc.agent, tc.code, got, tc.want)
		}
	}
}
