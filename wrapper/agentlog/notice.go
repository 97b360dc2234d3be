package agentlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// The agent CLIs retry failed API calls by themselves, and say so as they
// go. A rate limit they wait out stalls the task without pausing the
// account for the other tasks, and a refused key they retry cannot get
// better; so the supervisor reads each line of the tool's output as it
// comes and stops the tool when it announces such a retry (see
// RetryNotice). The attempt then ends as rate_limit, with the announced
// wait as its reset, or as auth.

// stopOnLimitWait is the shortest announced rate-limit wait the supervisor
// stops the tool for: a shorter one (a per-minute burst) the CLI rides out
// cheaper than a new attempt would.
const stopOnLimitWait = 15 * time.Second

// Notice is a retry a CLI announced: its class (rate_limit or auth) and,
// for a rate limit, how long the CLI said it would wait (0: unknown).
type Notice struct {
	Class string
	Wait  time.Duration
}

// Stops reports whether the supervisor stops the tool for n.
func (n Notice) Stops() bool {
	return n.Class == wire.ClassAuth || n.Class == wire.ClassRateLimit && n.Wait >= stopOnLimitWait
}

// RetryNotice reads line (prev is the line before it) for a retry the
// agent CLI agent announces in its own form. It knows
//
//   - claude's stream-json {"type":"system","subtype":"api_retry",
//     "error_status":429,"retry_delay_ms":22285,…} (401 and 403 are auth);
//   - gemini's "Attempt 1 failed: Quota exceeded … Please retry in 20s."
//     followed by "Suggested retry after 20s.. Retrying after 20023ms...";
//   - codex's {"type":"error","message":"Reconnecting... 1/5 (… 429 …)"}.
//
// A retry of any other error (a server error, an overloaded API, a broken
// connection) is no notice: the CLI's own retries are right for those. Nor
// is anything another tool prints (agent ""): a task that prints a
// notice's words is not waiting on any provider.
func RetryNotice(agent string, prev, line []byte, now time.Time) (Notice, bool) {
	line = bytes.TrimSpace(line)
	switch agent {
	case wire.AgentClaude:
		if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"api_retry"`)) {
			return Notice{}, false
		}
		var ev struct {
			Type         string  `json:"type"`
			Subtype      string  `json:"subtype"`
			ErrorStatus  int     `json:"error_status"`
			RetryDelayMS float64 `json:"retry_delay_ms"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Type != "system" || ev.Subtype != "api_retry" {
			return Notice{}, false
		}
		switch ev.ErrorStatus {
		case 429:
			return Notice{Class: wire.ClassRateLimit, Wait: scale(max(ev.RetryDelayMS, 0), time.Millisecond)}, true
		case 401, 403:
			return Notice{Class: wire.ClassAuth}, true
		}
		return Notice{}, false
	case wire.AgentGemini:
		if !bytes.Contains(line, []byte("etrying after")) {
			return Notice{}, false
		}
	case wire.AgentCodex:
		if !bytes.Contains(line, []byte("econnecting")) {
			return Notice{}, false
		}
	default:
		return Notice{}, false
	}
	lower := strings.ToLower(string(line))
	text := strings.ToLower(string(prev)) + "\n" + lower
	switch noticeClass(text) {
	case wire.ClassAuth:
		return Notice{Class: wire.ClassAuth}, true
	case wire.ClassRateLimit:
		return Notice{Class: wire.ClassRateLimit, Wait: ParseRetryAfter([]byte(text), now)}, true
	}
	return Notice{}, false
}

// noticeClass is the class a retried error's text names: narrower than
// Classify's patterns, since an overloaded or failing server is retried
// rightly.
func noticeClass(lower string) string {
	for _, w := range []string{"429", "401", "403"} {
		if lastWordIndex(lower, w) >= 0 {
			if w == "429" {
				return wire.ClassRateLimit
			}
			return wire.ClassAuth
		}
	}
	for _, s := range []string{"rate limit", "rate_limit", "quota exceeded", "resource_exhausted", "too many requests", "usage limit"} {
		if strings.Contains(lower, s) {
			return wire.ClassRateLimit
		}
	}
	for _, s := range []string{"invalid api key", "invalid_api_key", "api key not valid", "unauthorized", "unauthenticated"} {
		if strings.Contains(lower, s) {
			return wire.ClassAuth
		}
	}
	return ""
}

// proc.SessionID reads the tool's session id from a line of its output: claude's
// and gemini's {"type":"system","subtype":"init","session_id":…} or
// {"type":"init","session_id":…}, codex's {"type":"thread.started",
// "thread_id":…}. Only ids of a sane shape are taken: one goes back into a
// command line.
func SessionID(line []byte) string {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"type"`)) ||
		!bytes.Contains(line, []byte(`"init"`)) && !bytes.Contains(line, []byte(`"thread.started"`)) {
		return ""
	}
	var ev struct {
		Type      string `json:"type"`
		Subtype   string `json:"subtype"`
		SessionID string `json:"session_id"`
		ThreadID  string `json:"thread_id"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return ""
	}
	id := ""
	switch {
	case ev.Type == "system" && ev.Subtype == "init", ev.Type == "init":
		id = ev.SessionID
	case ev.Type == "thread.started":
		id = ev.ThreadID
	}
	if !wire.IsSessionID(id) {
		return ""
	}
	return id
}
