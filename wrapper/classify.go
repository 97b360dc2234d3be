package wrapper

import "strings"

// classifyTail is how much of the end of task.log Classify is shown.
const classifyTail = 8 << 10

type pattern struct {
	text      string
	wholeWord bool
	class     string
}

// patterns are matched case-insensitively against lower-cased log text.
var patterns = []pattern{
	{"429", true, ClassRateLimit},
	{"rate limit", false, ClassRateLimit},
	{"rate_limit", false, ClassRateLimit},
	{"ratelimit", false, ClassRateLimit},
	{"overloaded", false, ClassRateLimit},
	{"too many requests", false, ClassRateLimit},
	{"quota exceeded", false, ClassRateLimit},
	{"resource_exhausted", false, ClassRateLimit},
	{"usage limit", false, ClassRateLimit},
	{"401", true, ClassAuth},
	{"403", true, ClassAuth},
	{"invalid api key", false, ClassAuth},
	{"invalid_api_key", false, ClassAuth},
	{"invalid x-api-key", false, ClassAuth},
	{"authentication_error", false, ClassAuth},
	{"unauthorized", false, ClassAuth},
	{"unauthenticated", false, ClassAuth},
	{"api key not valid", false, ClassAuth},
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
	if len(logTail) > classifyTail {
		logTail = logTail[len(logTail)-classifyTail:]
	}
	text := strings.ToLower(string(logTail))
	class, best := ClassExit, -1
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

// lastWordIndex finds the last occurrence of w in s that is not part of a
// longer word or number, so that "429" matches "HTTP 429:" but not "14290".
func lastWordIndex(s, w string) int {
	for end := len(s); end > 0; {
		i := strings.LastIndex(s[:end], w)
		if i < 0 {
			return -1
		}
		j := i + len(w)
		if (i == 0 || !isWordByte(s[i-1])) && (j == len(s) || !isWordByte(s[j])) {
			return i
		}
		end = i + len(w) - 1
	}
	return -1
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}
