package agentlog

import (
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

type pattern struct {
	text      string
	wholeWord bool
	class     string
}

// patterns are matched case-insensitively against lower-cased log text.
var patterns = []pattern{
	{"429", true, wire.ClassRateLimit},
	{"rate limit", false, wire.ClassRateLimit},
	{"rate_limit", false, wire.ClassRateLimit},
	{"ratelimit", false, wire.ClassRateLimit},
	{"overloaded", false, wire.ClassRateLimit},
	{"too many requests", false, wire.ClassRateLimit},
	{"quota exceeded", false, wire.ClassRateLimit},
	{"resource_exhausted", false, wire.ClassRateLimit},
	{"usage limit", false, wire.ClassRateLimit},
	{"401", true, wire.ClassAuth},
	{"403", true, wire.ClassAuth},
	{"invalid api key", false, wire.ClassAuth},
	{"invalid_api_key", false, wire.ClassAuth},
	{"invalid x-api-key", false, wire.ClassAuth},
	{"authentication_error", false, wire.ClassAuth},
	{"unauthorized", false, wire.ClassAuth},
	{"unauthenticated", false, wire.ClassAuth},
	{"api key not valid", false, wire.ClassAuth},
}

// Classify returns the error class of a tool that exited with exitCode,
// judged from the end of its log: "" for exit 0, ClassRateLimit or ClassAuth
// when the log says so, ClassExit otherwise. When both kinds of message
// appear, the one nearest the end wins, since the last error is the one the
// tool gave up on.
func Classify(exitCode int, logTail []byte) string {
	if exitCode == 0 {
		return ""
	}
	if len(logTail) > taskfiles.ClassifyTail {
		logTail = logTail[len(logTail)-taskfiles.ClassifyTail:]
	}
	text := strings.ToLower(string(logTail))
	class, best := wire.ClassExit, -1
	for _, p := range patterns {
		var i int
		if p.wholeWord {
			i = lastWordIndex(text, p.text)
		} else {
			i = strings.LastIndex(text, p.text)
		}
		if i > best {
			class, best = p.class, i
		}
	}
	return class
}

// ExitClass is the class of a tool that exited with code: only an agent
// CLI (agent set) has an account whose rate limit or login its log may
// report; any other tool's exit is an exit, whatever it printed (issue 32).
func ExitClass(agent string, code int, logTail []byte) string {
	if agent == "" && code != 0 {
		return wire.ClassExit
	}
	return Classify(code, logTail)
}

// lastWordIndex finds the last occurrence of the status code w in s that
// reads as one: not part of a longer word or number ("429" matches "HTTP
// 429:" but not "14290" or "1.429"), and not the value of a field that
// names something else ("duration_ms":401 is a time, "status":401 and
// "Error: 401" are codes).
func lastWordIndex(s, w string) int {
	for end := len(s); end > 0; {
		i := strings.LastIndex(s[:end], w)
		if i < 0 {
			return -1
		}
		j := i + len(w)
		if (i == 0 || !isNumberByte(s[i-1])) && (j == len(s) || !isNumberByte(s[j])) && codeField(s[:i]) {
			return i
		}
		end = i + len(w) - 1
	}
	return -1
}

// codeField reports whether the text before a number leaves it free to be
// a status code: the number is not a field's value (key: N, "key":N,
// key=N), or the field's name says status, code, error or http.
func codeField(before string) bool {
	k := strings.TrimRight(before, " \t")
	if k == "" || (k[len(k)-1] != ':' && k[len(k)-1] != '=') {
		return true
	}
	k = strings.TrimRight(k[:len(k)-1], " \t\"'")
	start := len(k)
	for start > 0 && (isWordByte(k[start-1]) || k[start-1] == '-') {
		start--
	}
	key := k[start:]
	if key == "" {
		return true
	}
	for _, name := range []string{"status", "code", "error", "http"} {
		if strings.Contains(key, name) {
			return true
		}
	}
	return false
}

func isNumberByte(b byte) bool {
	return b == '.' || isWordByte(b)
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}
