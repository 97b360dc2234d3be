package agentlog

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	// 13:00 UTC is 14:00 in Paris and 08:00 in New York that day.
	now := time.Date(2026, 1, 2, 13, 0, 0, 0, time.UTC)
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			return nil
		}
		return loc
	}
	paris, newYork := zone("Europe/Paris"), zone("America/New_York")
	unix := strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
	tests := []struct {
		name string
		log  string
		loc  *time.Location // of now; nil means UTC
		zone string         // a zone the case needs, skipped without the zone database
		want time.Duration
	}{
		{"retry after seconds", "HTTP 429 Too Many Requests: retry after 90s\n", nil, "", 90 * time.Second},
		// Lines the real CLIs printed against a provider answering 429
		// with Retry-After: 20 (claude 2.1.330, gemini 0.61.0) and
		// codex 0.169.0's usage limit.
		{"claude api_retry", `{"type":"system","subtype":"api_retry","attempt":2,"max_retries":2,"retry_delay_ms":23583,"error_status":429,"error":"rate_limit","session_id":"c2404489"}` + "\n", nil, "", 23583 * time.Millisecond},
		{"gemini suggested retry", "Attempt 1 failed: Quota exceeded for requests per minute. Please retry in 20s.\nSuggested retry after 20s.. Retrying after 20023ms...\n", nil, "", 20 * time.Second},
		{"codex usage limit", `{"type":"turn.failed","error":{"message":"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 1:20 PM."}}` + "\n", nil, "", 20 * time.Minute},
		{"retry after seconds word", "Rate limited, retry after 120 seconds.\n", nil, "", 120 * time.Second},
		{"retry-after header", "< HTTP/1.1 429 Too Many Requests\r\n< Retry-After: 120\r\n< content-type: application/json\r\n", nil, "", 120 * time.Second},
		{"retry_after json", `{"error":{"type":"rate_limit_error","retry_after": 30}}` + "\n", nil, "", 30 * time.Second},
		{"retry-after-ms header", "retry-after-ms: 1500\n", nil, "", 1500 * time.Millisecond},
		{"retry-after http date", "Retry-After: Fri, 02 Jan 2026 13:30:00 GMT\n", nil, "", 30 * time.Minute},
		{"retry-after http date passed", "Retry-After: Thu, 01 Jan 2026 13:30:00 GMT\n", nil, "", 0},
		{"try again in compound", "Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2m30s. Visit https://platform.openai.com/account/rate-limits\n", nil, "", 150 * time.Second},
		{"try again in minutes", "Too many requests. Try again in 5 minutes.\n", nil, "", 5 * time.Minute},
		{"try again in ms", "Please try again in 6ms.\n", nil, "", 6 * time.Millisecond},
		{"try again in hours and minutes", "You've hit your usage limit. Try again in 1 hour and 5 minutes.\n", nil, "", 65 * time.Minute},
		{"try again in days is capped", "You've hit your usage limit. Upgrade to Pro or try again in 4 days 20 hours 9 minutes.\n", nil, "", 24 * time.Hour},
		{"gemini retry in", "[API Error: You exceeded your current quota. Please retry in 35.5s.]\n", nil, "", 35500 * time.Millisecond},
		{"gemini retryDelay", `"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "56s"}]` + "\n", nil, "", 56 * time.Second},
		{"resets in", "Rate limit hit; resets in 2h 13m\n", nil, "", 2*time.Hour + 13*time.Minute},
		{"claude resets pm", "5-hour limit reached ∙ resets 3pm\n", nil, "", 2 * time.Hour},
		{"claude resets with zone", "You've hit your limit · resets 3pm (Europe/Paris)\n", nil, "Europe/Paris", time.Hour},
		{"claude resets am", "Session limit reached ∙ resets 3:30am\n", nil, "", 14*time.Hour + 30*time.Minute},
		{"claude resets 24h clock", "limit reached, resets at 15:00\n", nil, "", 2 * time.Hour},
		{"claude reset at sentence", "Claude usage limit reached. Your limit will reset at 5pm (America/New_York).\n", nil, "America/New_York", 9 * time.Hour},
		{"time of day passed is tomorrow", "limit reached ∙ resets 11am\n", nil, "", 22 * time.Hour},
		{"time of day just passed", "limit reached ∙ resets 12:58\n", nil, "", time.Second},
		{"time of day now", "limit reached ∙ resets 1pm\n", nil, "", time.Second},
		{"local zone is now's", "limit reached ∙ resets 9am\n", newYork, "America/New_York", time.Hour},
		{"zone given beats now's", "limit reached ∙ resets 3pm (Europe/Paris)\n", newYork, "Europe/Paris", time.Hour},
		{"unknown zone falls back", "limit reached ∙ resets 3pm (Mars/Olympus_Mons)\n", nil, "", 2 * time.Hour},
		{"date and time", "Weekly limit reached ∙ resets Jan 2, 2pm\n", nil, "", time.Hour},
		{"date and time is capped", "Weekly limit reached ∙ resets Jan 9 at 2pm\n", nil, "", 24 * time.Hour},
		{"codex try again at", "You've hit your usage limit. Try again at Jan 2nd, 2026 4:00 PM.\n", nil, "", 3 * time.Hour},
		{"rfc 3339", "quota exhausted; resets at 2026-01-02T14:00:00Z\n", nil, "", time.Hour},
		{"claude unix time", "Claude AI usage limit reached|" + unix + "\n", nil, "", time.Hour},
		{"last announcement wins", "retry after 10s\nstill limited\nPlease try again in 20s.\n", nil, "", 20 * time.Second},
		{"later unparsable phrase is passed over", "retry after 10s\ntry again later\n", nil, "", 10 * time.Second},
		{"huge number is capped", "retry after 99999999999999999999999s\n", nil, "", 24 * time.Hour},
		{"no reset named", "API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}\n", nil, "", 0},
		{"tool's own backoff", "API Error (429) · Retrying in 5 seconds… (attempt 3/10)\n", nil, "", 0},
		{"resets without a time", "limit reached, resets 3\n", nil, "", 0},
		{"resets with a bad hour", "limit reached, resets 13pm\n", nil, "", 0},
		{"word inside a word", "loaded the preset 3pm theme\n", nil, "", 0},
		{"bare number after try again in", "try again in 30\n", nil, "", 0},
		{"zero", "retry after 0s\n", nil, "", 0},
		{"only the tail is read", "retry after 10s\n" + strings.Repeat("x", retryTail), nil, "", 0},
		{"empty", "", nil, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.zone != "" && zone(tc.zone) == nil {
				t.Skipf("no zone database entry for %s", tc.zone)
			}
			n := now
			if tc.loc != nil {
				n = now.In(tc.loc)
			}
			if got := ParseRetryAfter([]byte(tc.log), n); got != tc.want {
				t.Errorf("ParseRetryAfter(%q) = %s, want %s", tc.log, got, tc.want)
			}
		})
	}
	if paris == nil {
		return
	}
	// Across the start of summer time a time of day keeps its wall clock:
	// at 01:30 on 2026-03-29 in Paris, 3am is 30 minutes away, not 90.
	dst := time.Date(2026, 3, 29, 1, 30, 0, 0, paris)
	if got := ParseRetryAfter([]byte("resets 3am (Europe/Paris)"), dst); got != 30*time.Minute {
		t.Errorf("across summer time: %s, want 30m", got)
	}
}

// TestAgentReset: a reset counts only from the agent CLI's own reports; the
// same words from a shell task, or in another CLI's form, name none.
func TestAgentReset(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 13, 0, 0, 0, time.UTC)
	const (
		plain       = "API Error: 429 Too Many Requests: retry after 86400 seconds\n"
		claudeLimit = `{"type":"result","subtype":"success","is_error":true,"result":"Claude AI usage limit reached|1767362400"}` + "\n"
		claudeRetry = `{"type":"system","subtype":"api_retry","attempt":3,"retry_delay_ms":40000,"error_status":429,"error":"rate_limit"}` + "\n"
		codexFailed = `{"type":"turn.failed","error":{"message":"You've hit your usage limit. Try again in 2 hours."}}` + "\n"
		codexError  = `{"type":"error","message":"exceeded retry limit, last status: 429 Too Many Requests, retry after 120s"}` + "\n"
		geminiRetry = "Attempt 1 failed: Quota exceeded for quota metric. Please retry in 20s.\nSuggested retry after 20s.. Retrying after 20023ms...\n"
	)
	tests := []struct {
		name, agent, log string
		want             time.Duration
	}{
		{"claude's result event", wire.AgentClaude, claudeLimit, time.Hour},
		{"claude's last api_retry", wire.AgentClaude, claudeRetry + "API Error: 429 rate limited\n", 40 * time.Second},
		{"claude's result after its api_retry", wire.AgentClaude, claudeRetry + claudeLimit, time.Hour},
		{"claude: plain text names no reset", wire.AgentClaude, plain, 0},
		{"claude: codex's event names no reset", wire.AgentClaude, codexError, 0},
		{"codex's turn.failed", wire.AgentCodex, codexFailed, 2 * time.Hour},
		{"codex's error event", wire.AgentCodex, codexError, 2 * time.Minute},
		{"codex: claude's result names no reset", wire.AgentCodex, claudeLimit, 0},
		{"gemini's retry lines", wire.AgentGemini, geminiRetry + "Error: quota exceeded\n", 20 * time.Second},
		{"gemini: plain text names no reset", wire.AgentGemini, plain, 0},
		{"a shell task's plain line", "", plain, 0},
		{"a shell task printing claude's result", "", claudeLimit, 0},
		{"a shell task printing claude's api_retry", "", claudeRetry, 0},
		{"a shell task printing gemini's lines", "", geminiRetry, 0},
		{"capped at a day", wire.AgentClaude, `{"type":"result","is_error":true,"result":"resets in 30 days"}` + "\n", 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AgentReset(tt.agent, []byte(tt.log), now); got != tt.want {
				t.Errorf("AgentReset(%q) = %s, want %s", tt.agent, got, tt.want)
			}
		})
	}
}
